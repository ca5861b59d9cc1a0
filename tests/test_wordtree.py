from __future__ import annotations

import random
import re

from opsagent.wordtree import longest_first


def test_every_word_is_found_where_it_starts_as_a_flat_list_finds_it() -> None:
    rng = random.Random(24)
    alphabet = "abk-_:/ey."
    for _ in range(300):
        words = {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 8))}
        flat = re.compile("|".join(re.escape(w) for w in words))
        tree = re.compile(longest_first(words))
        every = re.compile(f"(?=({longest_first(words)}))")
        texts = [f"z{w}z" for w in words]
        texts += ["".join(rng.choice(alphabet + "xz ") for _ in range(rng.randint(0, 30))) for _ in range(20)]
        for text in texts:
            assert (flat.search(text) is None) == (tree.search(text) is None), (words, text)
            # the longest word at each position begins with every other word starting there
            found = {(m.start(), w) for m in every.finditer(text) for w in words if m.group(1).startswith(w)}
            expected = {(i, w) for w in words for i in range(len(text)) if text.startswith(w, i)}
            assert found == expected, (words, text)


def test_no_word_gives_a_pattern_that_never_matches() -> None:
    assert re.compile(longest_first([])).search("anything") is None
    assert re.compile(longest_first([""])).search("anything") is None
