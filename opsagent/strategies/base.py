"""What every strategy shares: the interface, its options, the outcome it hands the pipeline, and the
rules that say when an investigation is spent or settled.

A strategy decides *what to verify when*; it never decides a verdict (the judge does), never counts
a budget of its own (the loop and the meter do), and never sees the truth of a recorded incident.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from opsagent.fixtures import Edge
from opsagent.graph import descendants
from opsagent.lessons import Retrieved
from opsagent.loop import Meter, Proposed
from opsagent.models import (
    CHANGE_KINDS,
    Hypothesis,
    HypothesisResult,
    Incident,
    Lesson,
    Observation,
    PlanRevision,
)
from opsagent.reasoner import Reasoner
from opsagent.tools import Toolbox
from opsagent.tracing import span
from opsagent.triage import Triage, triage


@dataclass
class Outcome:
    triage: Triage
    results: list[HypothesisResult]
    proposed: list[Hypothesis]
    retrieved: list[Retrieved] = field(default_factory=list)
    #: the plan and every re-plan (``plan``), in order
    plan: list[PlanRevision] = field(default_factory=list)
    #: lessons the strategy already wrote while it searched, by hypothesis id (None: nothing to learn),
    #: so the pipeline does not ask the reasoner to reflect on the same result twice
    reflected: dict[str, Lesson | None] = field(default_factory=dict)


Recall = Callable[[Triage], list[Retrieved]]


def no_lessons(found: Triage) -> list[Retrieved]:
    return []


@runtime_checkable
class AsyncReasoner(Protocol):
    """A reasoner that thinks over the network (a model): it proposes and reflects asynchronously."""

    async def apropose(
        self, incident: Incident, triage: Triage, *, k: int, lessons: Sequence[Retrieved], exclude: set[str]
    ) -> list[Hypothesis]: ...

    async def areflect(
        self, incident: Incident, result: HypothesisResult, now: datetime, observations: Mapping[str, Observation]
    ) -> Lesson | None: ...


async def propose(
    reasoner: Reasoner, incident: Incident, found: Triage, *, k: int, lessons: Sequence[Retrieved], exclude: set[str]
) -> list[Hypothesis]:
    if isinstance(reasoner, AsyncReasoner):
        return await reasoner.apropose(incident, found, k=k, lessons=lessons, exclude=exclude)
    return reasoner.propose(incident, found, k=k, lessons=lessons, exclude=exclude)


async def proposal_round(
    reasoner: Reasoner,
    incident: Incident,
    found: Triage,
    meter: Meter,
    *,
    k: int,
    lessons: Sequence[Retrieved],
    exclude: set[str],
) -> list[Hypothesis]:
    """A round of the search: ``k`` new hypotheses, ranked, and told to the views (a round of the
    search tree); empty when the reasoner has nothing new to propose."""
    candidates = await propose(reasoner, incident, found, k=k, lessons=lessons, exclude=exclude)
    if not candidates:
        return []
    ranked = reasoner.rank(incident, candidates, found, lessons)
    meter.notify(Proposed(hypotheses=ranked))
    return ranked


async def reflect(
    reasoner: Reasoner,
    incident: Incident,
    result: HypothesisResult,
    now: datetime,
    observations: Mapping[str, Observation],
) -> Lesson | None:
    if isinstance(reasoner, AsyncReasoner):
        return await reasoner.areflect(incident, result, now, observations)
    return reasoner.reflect(incident, result, now, observations)


class Options(BaseModel):
    """A strategy's options, given as ``name:key=value,…`` (``tot:beam=3,depth=4``). None here:
    strategies with options declare their own, with defaults that follow the budget."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Strategy:
    name: ClassVar[str]
    options_model: ClassVar[type[Options]] = Options

    def __init__(self, options: Options | None = None) -> None:
        self.options = options if options is not None else self.options_model()

    @property
    def label(self) -> str:
        """The name, with the options that differ from their defaults: what a report says ran."""
        given = self.options.model_dump(exclude_defaults=True)
        return self.name + (":" + ",".join(f"{k}={v}" for k, v in sorted(given.items())) if given else "")

    async def run(
        self,
        incident: Incident,
        *,
        reasoner: Reasoner,
        toolbox: Toolbox,
        meter: Meter,
        topology: list[Edge],
        recall: Recall = no_lessons,
    ) -> Outcome:
        raise NotImplementedError


async def triaged(toolbox: Toolbox, incident: Incident, topology: list[Edge], meter: Meter) -> Triage:
    """Triage, its observations charged to the meter (they are read like any other)."""
    with span("opsagent.triage", incident_id=incident.id) as traced:
        found = await triage(toolbox, incident, topology)
        traced.set_attribute("opsagent.components", len(found.components))
        if found.components:
            traced.set_attribute("opsagent.top_suspect", found.components[0].component)
    meter.tokens += sum(toolbox.observations[oid].tokens for oid in sorted(set(found.read_ids)))
    return found


def stopped_by_budget(result: HypothesisResult) -> bool:
    return result.stop_reason.budget


def investigation_spent(meter: Meter) -> bool:
    """The investigation's own budgets (tokens, wall clock) are spent; a hypothesis that used up its
    steps ends alone."""
    return meter.exhausted(0) is not None


def proven(results: Sequence[HypothesisResult]) -> list[HypothesisResult]:
    return [r for r in results if r.verdict.status in ("confirmed", "probable")]


def below_proven(h: Hypothesis, results: Sequence[HypothesisResult], found: Triage) -> bool:
    """Whether h lies strictly downstream of a proven mechanism, which it could explain.

    A proven change is a cause, not a mechanism: nothing below it needs following."""
    for r in proven(results):
        shown = r.hypothesis
        if shown.kind in CHANGE_KINDS or shown.component == h.component:
            continue
        if h.component in descendants(found.graph, (shown.component,)):
            return True
    return False


def settled(results: Sequence[HypothesisResult], open_hypotheses: Sequence[Hypothesis], found: Triage) -> bool:
    """A cause is proven and nothing still open could lie beneath it: the question is answered."""
    return bool(proven(results)) and not any(below_proven(h, results, found) for h in open_hypotheses)


def relative(candidates: Sequence[Hypothesis]) -> dict[str, float]:
    """Each hypothesis' rank score as a share of the best one's (1.0 for the best)."""
    best = max((h.score for h in candidates), default=0.0) or 1.0
    return {h.id: h.score / best for h in candidates}
