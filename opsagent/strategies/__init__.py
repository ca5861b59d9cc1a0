"""Investigation strategies over the same tools, budgets, judge and report; one module each.

* ``hybrid`` (default): propose k -> rank -> verify the best b concurrently -> backtrack.
* ``react``: one greedy ReAct loop, no proposal, no ranking: the baseline.
* ``tot``: pure Tree-of-Thoughts, breadth-first with a value for every state and a beam.
* ``plan``: Plan-and-Execute over the locked objective, re-planning on surprise.
* ``mcts``: LATS — UCT selection, judge-valued rollouts, reflection between rollouts.
* ``reflexion``: react retried with the lessons of its failed attempts.

A strategy is named with its options, if any: ``tot``, ``tot:beam=3,depth=4``, ``mcts:iterations=8``.
"""

from __future__ import annotations

from pydantic import ValidationError

from opsagent.errors import ConfigError
from opsagent.strategies.base import (
    AsyncReasoner,
    Options,
    Outcome,
    Recall,
    Strategy,
    no_lessons,
    propose,
    reflect,
)
from opsagent.strategies.hybrid import Hybrid
from opsagent.strategies.mcts import LanguageAgentTreeSearch
from opsagent.strategies.plan import PlanAndExecute
from opsagent.strategies.react import GreedyReact
from opsagent.strategies.reflexion import Reflexion
from opsagent.strategies.tot import TreeOfThoughts

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (Hybrid, GreedyReact, TreeOfThoughts, PlanAndExecute, LanguageAgentTreeSearch, Reflexion)
}


def strategy(spec: str) -> Strategy:
    """The strategy ``spec`` names: ``name`` or ``name:key=value,…`` (its options)."""
    name, _, given = spec.strip().partition(":")
    cls = STRATEGIES.get(name)
    if cls is None:
        raise ConfigError(f"unknown strategy {name!r}; choose one of: {', '.join(STRATEGIES)}")
    fields = cls.options_model.model_fields
    values: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in given.split(","))):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or key not in fields:
            known = ", ".join(f"{k} ({f.description})" for k, f in fields.items()) or "none"
            raise ConfigError(f"strategy {name}: {part!r} is not an option; its options: {known}")
        values[key] = value.strip()
    try:
        options = cls.options_model.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"strategy {name}: {problems}") from None
    return cls(options)


__all__ = [
    "STRATEGIES",
    "AsyncReasoner",
    "GreedyReact",
    "Hybrid",
    "LanguageAgentTreeSearch",
    "Options",
    "Outcome",
    "PlanAndExecute",
    "Recall",
    "Reflexion",
    "Strategy",
    "TreeOfThoughts",
    "no_lessons",
    "propose",
    "reflect",
    "strategy",
]
