"""Investigation strategies over the same tools, judge and report.

* ``hybrid`` (default): triage -> propose k -> rank -> verify the best b concurrently (budgeted
  ReAct) -> backtrack to the next candidates while nothing is confirmed and budget lasts.
* ``react``: one greedy ReAct loop with no proposal and no ranking: at each turn it chases the
  loudest signal it has seen so far. The baseline the hybrid strategy is measured against.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from opsagent import ranking
from opsagent.errors import ConfigError
from opsagent.features import profiles_from
from opsagent.fixtures import Edge
from opsagent.graph import descendants
from opsagent.lessons import Retrieved, concrete
from opsagent.loop import Meter, verify
from opsagent.models import (
    CHANGE_KINDS,
    Action,
    Hypothesis,
    HypothesisResult,
    Incident,
    Lesson,
    LogsData,
    Observation,
)
from opsagent.reasoner import PlaybookReasoner, Reasoner
from opsagent.tools import Toolbox
from opsagent.triage import ComponentProfile, Triage, triage


@dataclass
class Outcome:
    triage: Triage
    results: list[HypothesisResult]
    proposed: list[Hypothesis]
    retrieved: list[Retrieved] = field(default_factory=list)


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


class Strategy:
    name: str

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


class Hybrid(Strategy):
    name = "hybrid"

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
        found = await triage(toolbox, incident, topology)
        meter.tokens += sum(toolbox.observations[oid].tokens for oid in sorted(set(found.read_ids)))
        lessons = recall(found)
        available = set(found.source_kinds)
        k, beam = meter.budget.k, meter.budget.beam
        tried: set[str] = set()
        proposed: list[Hypothesis] = []
        results: list[HypothesisResult] = []
        while not _spent(meter, results):
            candidates = await propose(reasoner, incident, found, k=k, lessons=lessons, exclude=tried)
            if not candidates:
                break
            queue = reasoner.rank(incident, candidates, found, lessons)
            proposed.extend(queue)
            tried.update(h.id for h in queue)
            best = max(h.score for h in queue)
            while queue and not _spent(meter, results):
                if _proven(results):
                    # A proven mechanism (a pool exhausted) asks "why?": follow only what lies below it.
                    queue = [h for h in queue if _below_proven(h, results, found)]
                    if not queue:
                        break
                kept = queue[:1] + [h for h in queue[1:beam] if h.score >= ranking.BEAM_FLOOR * best]
                queue = [h for h in queue if all(h.id != k.id for k in kept)]
                batch = await asyncio.gather(
                    *(
                        verify(
                            h, incident=incident, reasoner=reasoner, toolbox=toolbox, meter=meter, available=available
                        )
                        for h in kept
                    )
                )
                results.extend(batch)
            if _proven(results) and not any(_below_proven(h, results, found) for h in queue):
                break
        return Outcome(triage=found, results=results, proposed=proposed, retrieved=lessons)


def _spent(meter: Meter, results: list[HypothesisResult]) -> bool:
    """The investigation's budgets (tokens, wall clock) are spent; a hypothesis that used its own
    step allowance ends alone, and the next candidates still get their turn."""
    return meter.exhausted(0) is not None or any(
        r.stop_reason.startswith("budget") and not r.stop_reason.endswith(" steps") for r in results
    )


def _proven(results: list[HypothesisResult]) -> list[HypothesisResult]:
    return [r for r in results if r.verdict.status in ("confirmed", "probable")]


def _below_proven(h: Hypothesis, results: list[HypothesisResult], found: Triage) -> bool:
    """Whether h lies strictly downstream of a proven mechanism, which it could explain.

    A proven change is a cause, not a mechanism: nothing below it needs following."""
    for r in _proven(results):
        proven = r.hypothesis
        if proven.kind in CHANGE_KINDS or proven.component == h.component:
            continue
        if h.component in descendants(found.graph, (proven.component,)):
            return True
    return False


class GreedyReact(Strategy):
    """Follows the loudest signal it has seen: no triage over the graph, no ranking, no backtracking plan.

    It starts from the alerting service, reads its symptom, logs and traces, and at each turn turns
    the loudest unexplored anomaly into the single hypothesis it then verifies.
    """

    name = "react"

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
        svc = incident.service
        opening = [
            Action(tool="logs.summary", args={"service": svc}),
            Action(tool="metrics.scan"),
            Action(tool="traces.summary", args={"service": svc}),
        ]
        seen: list[Observation] = []
        for action in opening:
            seen.append(await toolbox.call(action))
            meter.steps += 1
            meter.tokens += seen[-1].tokens
        found = _loudness(incident, seen, topology)
        lessons = recall(found)
        avoid = {(r.lesson.refuted_kind, r.component) for r in lessons if r.applies}
        for r in lessons:  # a lesson's next action is the first thing to look at under its trigger
            if r.component is not None:
                seen.append(await toolbox.call(concrete(r.lesson.next_action, r.component)))
                meter.steps += 1
                meter.tokens += seen[-1].tokens
        found = _loudness(incident, seen, topology)
        available = set(found.source_kinds)
        results: list[HypothesisResult] = []
        chased: set[str] = set()
        proposed: list[Hypothesis] = []
        while not meter.exhausted(0):
            loudest = await _next_loudest(found, reasoner, incident, chased, avoid)
            if loudest is None:
                break
            chased.add(loudest.id)
            proposed.append(loudest)
            result = await verify(
                loudest, incident=incident, reasoner=reasoner, toolbox=toolbox, meter=meter, available=available
            )
            results.append(result)
            if result.verdict.status in ("confirmed", "probable") or result.stop_reason.startswith("budget"):
                break
        return Outcome(triage=found, results=results, proposed=proposed, retrieved=lessons)


def _loudness(incident: Incident, seen: list[Observation], topology: list[Edge]) -> Triage:
    """Rank components by the raw size of their loudest anomaly: no propagation, no explaining away.

    Loudness is what a greedy reader notices: a metric by how many times it moved, a log family by
    how many lines it wrote (890 timeouts shout louder than a queue that grew)."""
    profiles = profiles_from(seen, incident)
    for obs in seen:
        if isinstance(obs.data, LogsData) and obs.data.service in profiles:
            features = profiles[obs.data.service].features
            for family, count in obs.data.families.items():
                if f"log:{family}" in features:
                    features[f"log:{family}"] = math.log2(1 + count) / 2
    components = []
    for name, p in profiles.items():
        loud = max(p.features.values(), default=0.0)
        components.append(
            ComponentProfile(
                component=name,
                own=loud,
                score=loud,
                reachable=True,
                features=p.features,
                evidence=p.evidence,
                why=p.why,
            )
        )
    components.sort(key=lambda c: (-c.score, c.component))
    kinds = sorted({o.source for o in seen if o.ok and o.source is not None})
    return Triage(graph=topology, components=components, observation_ids=[o.id for o in seen], source_kinds=kinds)


async def _next_loudest(
    found: Triage, reasoner: Reasoner, incident: Incident, chased: set[str], avoid: set[tuple[str, str | None]]
) -> Hypothesis | None:
    """The hypothesis behind the single loudest feature not yet chased, skipping dead ends lessons know."""
    features = sorted(
        ((mag, comp.component, feat) for comp in found.components for feat, mag in comp.features.items()),
        key=lambda x: (-x[0], x[1], x[2]),
    )
    if not isinstance(reasoner, PlaybookReasoner):
        proposals = await propose(reasoner, incident, found, k=1, lessons=[], exclude=chased)
        return proposals[0] if proposals else None
    for _, component, feature in features:
        comp = found.profile(component)
        if comp is None:
            continue
        single = comp.model_copy(update={"features": {feature: comp.features[feature]}, "score": 1.0})
        narrow = Triage(graph=found.graph, components=[single], observation_ids=[], source_kinds=found.source_kinds)
        options = reasoner.propose(incident, narrow, k=3, lessons=[], exclude=chased)
        for option in options:
            if (option.kind, option.component) not in avoid:
                return option
    return None


STRATEGIES: dict[str, type[Strategy]] = {"hybrid": Hybrid, "react": GreedyReact}


def strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]()
    except KeyError:
        raise ConfigError(f"unknown strategy {name!r}; choose one of: {', '.join(STRATEGIES)}") from None
