"""The value of a search state (a hypothesis and the evidence read for it so far), for ``tot`` and ``mcts``.

It is the judge's running assessment, never the reasoner's opinion: a refuted hypothesis is worth
nothing, a confirmed one everything, and in between a state is worth how far its cited evidence has
come towards what the judge needs to confirm (two supporting items from two kinds of source), with a
little of its rank score so that untested states still order by how likely they looked.

The numbers are named here, each with what it stands for; the numbers that rank suspects and
hypotheses are :mod:`opsagent.ranking`'s and are only read.
"""

from __future__ import annotations

from opsagent.models import Verdict

#: A confirmed hypothesis: the search found what it was looking for.
CONFIRMED_VALUE = 1.0
#: Probable (strong evidence, but the environment has only one kind of source to give).
PROBABLE_VALUE = 0.9
#: Refuted: a dead end.
REFUTED_VALUE = 0.0
#: What the rank score (relative to the round's best) counts for in an open state; the rest is the
#: evidence's progress. Small, so that one supporting observation outweighs any prior.
PRIOR_SHARE = 0.25
#: Supporting items and kinds of source the judge needs to confirm; progress counts each up to these.
ITEMS_NEEDED, KINDS_NEEDED = 2, 2


def progress(verdict: Verdict) -> float:
    """How far the supporting evidence has come towards a confirmation, 0 to 1."""
    items = min(len(verdict.supporting), ITEMS_NEEDED) / ITEMS_NEEDED
    kinds = min(len({e.source for e in verdict.supporting}), KINDS_NEEDED) / KINDS_NEEDED
    return (items + kinds) / 2


def value(verdict: Verdict, *, prior: float) -> float:
    """A state's value, 0 to 1; ``prior`` is the hypothesis' rank score relative to the best (0 to 1)."""
    if verdict.status == "confirmed":
        return CONFIRMED_VALUE
    if verdict.status == "probable":
        return PROBABLE_VALUE
    if verdict.status == "refuted":
        return REFUTED_VALUE
    return round(PRIOR_SHARE * min(max(prior, 0.0), 1.0) + (1 - PRIOR_SHARE) * progress(verdict), 6)
