"""``react``: one greedy ReAct loop with no proposal and no ranking: at each turn it chases the
loudest signal it has seen so far. The baseline the other strategies are measured against."""

from __future__ import annotations

import math

from opsagent.features import profiles_from
from opsagent.fixtures import Edge
from opsagent.lessons import concrete
from opsagent.loop import Meter, Proposed, verify
from opsagent.models import Action, Hypothesis, HypothesisResult, Incident, LogsData, Observation
from opsagent.reasoner import PlaybookReasoner, Reasoner
from opsagent.strategies.base import Options, Outcome, Recall, Strategy, no_lessons, propose, stopped_by_budget
from opsagent.tools import Toolbox
from opsagent.triage import ComponentProfile, Triage


class GreedyReact(Strategy):
    """Follows the loudest signal it has seen: no triage over the graph, no ranking, no backtracking plan.

    It starts from the alerting service, reads its symptom, logs and traces, and at each turn turns
    the loudest unexplored anomaly into the single hypothesis it then verifies.
    """

    name = "react"

    def __init__(self, options: Options | None = None, *, verified: frozenset[str] = frozenset()) -> None:
        super().__init__(options)
        self.verified = verified  # hypotheses an earlier attempt verified (reflexion): not chased again

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
        if toolbox.sources.kubernetes is not None:  # where the cluster is read, what it says is broken
            opening.append(Action(tool="kubernetes.pods"))
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
        chased: set[str] = set(self.verified)
        proposed: list[Hypothesis] = []
        while not meter.exhausted(0):
            loudest = await _next_loudest(found, reasoner, incident, chased, avoid)
            if loudest is None:
                break
            chased.add(loudest.id)
            meter.notify(Proposed(hypotheses=[loudest]))
            proposed.append(loudest)
            result = await verify(
                loudest, incident=incident, reasoner=reasoner, toolbox=toolbox, meter=meter, available=available
            )
            results.append(result)
            if result.verdict.status in ("confirmed", "probable") or stopped_by_budget(result):
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
        single = comp.model_copy(update={"features": _signal(comp.features, feature), "score": 1.0})
        narrow = Triage(graph=found.graph, components=[single], observation_ids=[], source_kinds=found.source_kinds)
        options = reasoner.propose(incident, narrow, k=3, lessons=[], exclude=chased)
        for option in options:
            if (option.kind, option.component) not in avoid:
                return option
    return None


def _signal(features: dict[str, float], feature: str) -> dict[str, float]:
    """The one signal a feature belongs to. A broken object's finding is one signal, read whole: that
    the object is broken (``kube:broken``), how (``kube:<sign>``) and the kind it points to
    (``kube:points_to:<kind>``) come together, so the greedy reader names the kind the object names."""
    if feature.startswith("kube:"):
        return {f: v for f, v in features.items() if f.startswith("kube:")}
    return {feature: features[feature]}
