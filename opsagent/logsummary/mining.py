"""Template mining: group masked messages into templates, Drain-style, one message at a time.

A fixed-depth parse tree keyed by token count, then the leading tokens, leads to a short list of
templates; the message joins the most similar one if enough of its tokens agree (a position where
they differ becomes the wildcard ``<*>``), or starts a new template. Two refinements over Drain
(He et al., ICWS 2017), both the same for every log source:

- two different *words* in the same position never merge: "VM Started" and "VM Paused" are two
  events, "user 42" and "user 43" are one. Neither do two different tokens in a one- or two-token
  message, where a single shared token is no evidence;
- when the stream ends, templates that differ only by a word in one position, in at least
  ``sibling_values`` variants around at least ``sibling_context`` constant words, are one template
  whose word is a variable (user names, host names).

The miner holds a bounded number of templates: past ``max_templates``, a message that matches none
gets no template (the caller counts it in an explicit "other" bucket). It never evicts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from opsagent.logsummary.masking import is_masked

WILDCARD = "<*>"

#: A word: letters, perhaps a short number (SOCKS5, ssh2), perhaps wrapped in punctuation.
_WORD = re.compile(r"[\"'(\[]*[A-Za-z]{2,}\d{0,2}[\"')\].,;:]*")
_DIGIT = re.compile(r"\d")


_WORDS: dict[str, bool] = {}


def is_word(token: str) -> bool:
    known = _WORDS.get(token)
    if known is None:
        if len(_WORDS) >= 50_000:
            _WORDS.clear()
        known = _WORDS[token] = _WORD.fullmatch(token) is not None
    return known


def _is_variable(token: str) -> bool:
    """Tokens routed to the tree's wildcard branch: they hold numbers or masks."""
    return _DIGIT.search(token) is not None or is_masked(token)


@dataclass(eq=False, slots=True)
class Template:
    index: int
    tokens: list[str]

    @property
    def text(self) -> str:
        return " ".join(self.tokens)


#: A node with this many templates counts the tokens each shares with a message from an index of
#: its templates' tokens by position (see _Node.holding) instead of comparing each template in turn.
#: A smaller node is compared template by template, as before: the index pays where hundreds of
#: templates share a node (mining eight nezha-tt cases, whose nodes are small, costs the same).
INDEX_FROM = 16


@dataclass(eq=False, slots=True)
class _Node:
    children: dict[str, _Node] = field(default_factory=dict)
    templates: list[Template] = field(default_factory=list)
    #: once the node holds INDEX_FROM templates: per position, the index of the template holding each
    #: token there, or the indexes when several do. A long message whose lines each keep their own
    #: numbers in a token meets hundreds of templates of its length and first word, nearly all sharing
    #: too few tokens with it. Most tokens are one template's (33,676 of 35,177 at the end of 300k
    #: loghub lines): a list each was 2.9 MiB.
    holding: list[dict[str, int | list[int]]] | None = None

    def hold(self, template: Template) -> None:
        if self.holding is not None:
            index = template.index
            for column, token in zip(self.holding, template.tokens, strict=True):
                _add(column, token, index)
        elif len(self.templates) >= INDEX_FROM:
            self.holding = [{} for _ in template.tokens]
            for t in self.templates:
                self.hold(t)

    def widen(self, template: Template, position: int, before: str) -> None:
        if self.holding is not None:
            column = self.holding[position]
            held = column[before]
            if isinstance(held, int):
                del column[before]
            else:
                held.remove(template.index)
                if not held:
                    del column[before]
            _add(column, WILDCARD, template.index)

    def sharing(self, tokens: Sequence[str], similarity: float) -> list[Template]:
        """The node's templates, in order, less those that hold too few of the tokens at their positions
        to reach ``similarity`` (:meth:`TemplateMiner._closest` would never return them)."""
        n = len(tokens)
        if self.holding is None or not n:
            return self.templates
        counts: dict[int, int] = {}
        for column, token in zip(self.holding, tokens, strict=True):
            found = column.get(token)
            if found is None:
                continue
            if isinstance(found, int):
                counts[found] = counts.get(found, 0) + 1
            else:
                for i in found:
                    counts[i] = counts.get(i, 0) + 1
        return [t for t in self.templates if counts.get(t.index, 0) / n >= similarity]


def _add(column: dict[str, int | list[int]], token: str, index: int) -> None:
    held = column.get(token)
    if held is None:
        column[token] = index
    elif isinstance(held, int):
        column[token] = [held, index]
    else:
        held.append(index)


class TemplateMiner:
    def __init__(
        self,
        *,
        similarity: float = 0.5,
        prefix_tokens: int = 1,
        max_children: int = 100,
        max_templates: int = 2000,
        sibling_values: int = 5,
        sibling_context: int = 3,
    ) -> None:
        self.similarity = similarity
        self.prefix_tokens = prefix_tokens
        self.max_children = max_children
        self.max_templates = max_templates
        self.sibling_values = sibling_values
        self.sibling_context = sibling_context
        self.templates: list[Template] = []
        self._root: dict[int, _Node] = {}
        self._nodes: list[_Node] = []  # each template's node, by index

    def add(
        self, tokens: Sequence[str], *, likely: Template | None = None
    ) -> tuple[Template | None, list[tuple[int, str]]]:
        """The template the tokens join (``None`` past the template limit), and the positions of that
        template that just became wildcards with the token each held before.

        ``likely`` is tried first (the template a message of the same shape joined): when the tokens
        are similar enough to it, they join it without searching the tree.
        """
        n = len(tokens)
        if likely is not None and len(likely.tokens) == n and self._closest([likely], tokens) is likely:
            return likely, self._widen(likely, tokens)
        node = self._root.get(n)
        if node is None:
            node = self._root[n] = _Node()
        for token in tokens[: min(self.prefix_tokens, n - 1)]:
            key = WILDCARD if _is_variable(token) else token
            child = node.children.get(key)
            if child is None and key != WILDCARD and len(node.children) >= self.max_children:
                key = WILDCARD
                child = node.children.get(key)
            if child is None:
                child = node.children[key] = _Node()
            node = child
        best = self._closest(node.sharing(tokens, self.similarity), tokens)
        if best is not None:
            return best, self._widen(best, tokens)
        if len(self.templates) >= self.max_templates:
            return None, []
        template = Template(index=len(self.templates), tokens=list(tokens))
        self.templates.append(template)
        self._nodes.append(node)
        node.templates.append(template)
        node.hold(template)
        return template, []

    def _widen(self, template: Template, tokens: Sequence[str]) -> list[tuple[int, str]]:
        pairs = enumerate(zip(template.tokens, tokens, strict=True))
        widened = [(i, a) for i, (a, b) in pairs if a != b and a != WILDCARD]
        node = self._nodes[template.index]
        for i, a in widened:
            template.tokens[i] = WILDCARD
            node.widen(template, i, a)
        return widened

    def _closest(self, candidates: list[Template], tokens: Sequence[str]) -> Template | None:
        n = len(tokens)
        # a candidate with more differing positions than this cannot reach the threshold
        allowed = n - self.similarity * n
        best: Template | None = None
        best_sim, best_params = -1.0, -1
        for template in candidates:
            same = params = differ = 0
            for a, b in zip(template.tokens, tokens, strict=True):
                if a == b:
                    same += 1
                    continue
                differ += 1
                if differ > allowed:
                    break
                if a == WILDCARD:
                    params += 1
                elif _distinct(a, b, n):
                    break
            else:
                sim = same / n if n else 1.0
                if sim > best_sim or (sim == best_sim and params > best_params):
                    best, best_sim, best_params = template, sim, params
        return best if best is not None and best_sim >= self.similarity else None

    def merged(self) -> list[int]:
        """For each template, the index of the template it is one with once the stream has ended:
        identical texts, and siblings that differ by a word in one position."""
        parent = list(range(len(self.templates)))

        def root(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        def union(members: list[int]) -> None:
            first = root(members[0])
            for m in members[1:]:
                r = root(m)
                if r != first:
                    parent[max(r, first)] = min(r, first)
                    first = min(r, first)

        by_text: dict[tuple[str, ...], list[int]] = {}
        #: templates with a word at each position and enough words around it to be a sibling
        at: dict[int, list[Template]] = {}
        for t in self.templates:
            by_text.setdefault(tuple(t.tokens), []).append(t.index)
            words = [i for i, tok in enumerate(t.tokens) if is_word(tok)]
            if len(words) - 1 >= self.sibling_context:
                for i in words:
                    at.setdefault(i, []).append(t)
        for members in by_text.values():
            if len(members) > 1:
                union(members)
        # Siblings one word position at a time: each key is a template's copy without the word, and
        # the copies of one position are all that is held at once (all positions' copies at once
        # were 10 MiB at the end of 300k loghub lines, most of the summary's peak). The components,
        # and so each template's root (its component's lowest index), do not depend on the order.
        for i, holding in at.items():
            siblings: dict[tuple[tuple[str, ...], tuple[str, ...]], list[Template]] = {}
            for t in holding:
                siblings.setdefault((tuple(t.tokens[:i]), tuple(t.tokens[i + 1 :])), []).append(t)
            for group in siblings.values():
                if len(group) >= self.sibling_values and len({t.tokens[i] for t in group}) >= self.sibling_values:
                    union([t.index for t in group])
        return [root(i) for i in range(len(self.templates))]


def combined(token_lists: Sequence[Sequence[str]]) -> list[str]:
    """One template for templates of equal length: their common tokens, wildcards elsewhere."""
    return [column[0] if all(t == column[0] for t in column) else WILDCARD for column in zip(*token_lists, strict=True)]


def _distinct(a: str, b: str, n: int) -> bool:
    """Tokens that name different events, never one variable: two words, or in a message of one or two
    tokens, any two tokens without numbers or masks."""
    if is_word(a) and is_word(b):
        return True
    return n <= 2 and not _is_variable(a) and not _is_variable(b)
