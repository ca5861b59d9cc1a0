"""Reasoners: who thinks. They propose hypotheses, choose the next action, and write lessons.

The pipeline asks every reasoner the same four questions (:class:`Reasoner`). The playbook reasoner
is the embedded default: deterministic, offline, free. ``ScriptedReasoner`` is the fake that ships
in the package, so tests drive the loop without a model.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from pydantic import BaseModel

from opsagent.models import (
    CHANGE_KINDS,
    Action,
    Citation,
    Evidence,
    Hypothesis,
    HypothesisResult,
    Incident,
    Lesson,
    LessonTrigger,
    Observation,
    SourceKind,
    Step,
    Symptom,
)
from opsagent.playbooks import Check, Context, Playbook, evaluate, fill, placeholder_values
from opsagent.triage import ComponentProfile, Triage


class Decision(BaseModel):
    thought: str
    action: Action | None
    evidence: list[Evidence] = []


class Reasoner(Protocol):
    name: str

    def propose(
        self, incident: Incident, triage: Triage, *, k: int, lessons: Sequence[Lesson], exclude: set[str]
    ) -> list[Hypothesis]: ...

    def rank(
        self, incident: Incident, candidates: list[Hypothesis], triage: Triage, lessons: Sequence[Lesson]
    ) -> list[Hypothesis]: ...

    async def decide(
        self,
        incident: Incident,
        hypothesis: Hypothesis,
        steps: Sequence[Step],
        observations: Mapping[str, Observation],
        *,
        final: bool,
    ) -> Decision: ...

    def reflect(self, incident: Incident, result: HypothesisResult, now: datetime) -> Lesson | None: ...


#: How many of triage's top components get hypotheses.
TOP_COMPONENTS = 6


def action_of(check: Check, hypothesis: Hypothesis, incident: Incident) -> Action:
    values = placeholder_values(hypothesis.component, incident.symptom.value, incident.service)
    args = {k: fill(v, values) if isinstance(v, str) else v for k, v in check.args.items()}
    return Action(tool=check.tool, args=args)


class PlaybookReasoner:
    """Hypotheses from playbooks x triage's suspects; actions from the playbooks' checks."""

    name = "playbook"

    def __init__(self, playbooks: Sequence[Playbook]) -> None:
        self.playbooks = {p.id: p for p in playbooks}

    def propose(
        self, incident: Incident, triage: Triage, *, k: int, lessons: Sequence[Lesson], exclude: set[str]
    ) -> list[Hypothesis]:
        suspects = [c for c in triage.components if c.score > 0 or c.component in incident.services]
        suspects = suspects[:TOP_COMPONENTS]
        top = max((c.score for c in suspects), default=0.0) or 1.0
        top_own = max((c.own for c in triage.components), default=0.0) or 1.0
        out = []
        for comp, book in self._pairs(suspects, triage):
            match = book.match(comp.features, incident.symptom)
            hid = f"{book.id}@{comp.component}"
            if match is None or hid in exclude:
                continue
            if book.applies.role == "downstream" and (comp.component in incident.services or not comp.reachable):
                continue
            # Where a wave starts, its own anomaly is what counts: explaining-away and
            # reachability from the alert run the other way for it.
            weight = comp.own / top_own if book.applies.role == "origin" else comp.score / top
            values = placeholder_values(comp.component, incident.symptom.value, incident.service)
            matched = [p for p in book.applies.indicators if any(_fits(p, f) for f in comp.features)]
            score = book.prior * (0.25 + match) * (0.2 + weight)
            out.append(
                Hypothesis(
                    id=hid,
                    component=comp.component,
                    kind=book.kind,
                    statement=fill(book.statement, values),
                    confirm_if=[fill(c.says, values) for c in book.checks if c.confirm],
                    refute_if=[fill(c.says, values) for c in book.checks if c.refute],
                    prior=book.prior,
                    score=round(score, 5),
                    playbook=book.id,
                    why=[f"matched {', '.join(matched) or 'no indicator'}", *comp.why[:3]],
                    explains=[f"{comp.component}/{f}" for f in book.explained(comp.features)],
                    consequences=book.consequences,
                )
            )
        out.sort(key=lambda h: (-h.score, h.id))
        return out[:k]

    def _pairs(self, suspects: list[ComponentProfile], triage: Triage) -> list[tuple[ComponentProfile, Playbook]]:
        """Playbooks x triage's top suspects; origin playbooks x every component where a wave starts."""
        pairs = [(c, b) for c in suspects for b in self.playbooks.values() if b.applies.role != "origin"]
        for book in (b for b in self.playbooks.values() if b.applies.role == "origin"):
            for comp in triage.components:
                if book.match(comp.features, Symptom.unknown) is None:
                    continue
                callers = [triage.profile(e.caller) for e in triage.graph if e.callee == comp.component]
                if not any(p is not None and book.match(p.features, Symptom.unknown) is not None for p in callers):
                    pairs.append((comp, book))
        return pairs

    def rank(
        self, incident: Incident, candidates: list[Hypothesis], triage: Triage, lessons: Sequence[Lesson]
    ) -> list[Hypothesis]:
        ranked = []
        for h in candidates:
            penalty = 1.0
            for lesson in lessons:
                if lesson.refuted_kind == h.kind and (not lesson.services or h.component in lesson.services):
                    penalty *= 0.5
            ranked.append(h.model_copy(update={"score": round(h.score * penalty, 5)}) if penalty != 1 else h)
        ranked.sort(key=lambda h: (-h.score, h.id))
        weights = {f"{c.component}/{f}": m for c in triage.components for f, m in c.features.items()}
        ordered = diverse(ranked, weights)
        # A change hypothesis verifies the mechanism it touched (a pool resized -> that pool
        # exhausted): that mechanism is the same explanation, so rivals go before it.
        chained = {h.id for h in ordered if self._set_off_by_change(h, ordered, triage)}
        return [h for h in ordered if h.id not in chained] + [h for h in ordered if h.id in chained]

    def _set_off_by_change(self, h: Hypothesis, ranked: list[Hypothesis], triage: Triage) -> bool:
        book = self.playbooks.get(h.playbook or "")
        if book is None or not book.keywords or h.kind in CHANGE_KINDS:
            return False
        if not any(o.kind in CHANGE_KINDS and o.component == h.component for o in ranked):
            return False
        text = " ".join(f"{c.summary}\n{c.diff or ''}" for c in triage.changes if c.service == h.component).lower()
        return any(word.lower() in text for word in book.keywords)

    async def decide(
        self,
        incident: Incident,
        hypothesis: Hypothesis,
        steps: Sequence[Step],
        observations: Mapping[str, Observation],
        *,
        final: bool,
    ) -> Decision:
        book = self.playbooks[hypothesis.playbook or ""]
        planned = [(check, action_of(check, hypothesis, incident)) for check in book.checks]
        evidence: list[Evidence] = []
        if steps and steps[-1].action is not None and steps[-1].observation_id in observations:
            last = steps[-1]
            obs = observations[last.observation_id or ""]
            for check, action in planned:
                if action == last.action:
                    evidence.extend(self._assess(check, obs, hypothesis, incident))
        done = {s.action.key() for s in steps if s.action is not None}
        pending = [(c, a) for c, a in planned if a.key() not in done]
        if final or not pending:
            return Decision(
                thought="No further checks: handing the evidence to the judge.", action=None, evidence=evidence
            )
        check, action = pending[0]
        values = placeholder_values(hypothesis.component, incident.symptom.value, incident.service)
        return Decision(thought=fill(check.says, values), action=action, evidence=evidence)

    @staticmethod
    def _assess(check: Check, obs: Observation, hypothesis: Hypothesis, incident: Incident) -> list[Evidence]:
        if obs.source is None or not obs.ok:
            return []
        ctx = Context(incident=incident, service=hypothesis.component)
        out = []
        for stance, exp in (("supports", check.confirm), ("refutes", check.refute)):
            if exp is None:
                continue
            outcome = evaluate(exp, obs, ctx)
            if outcome.met:
                out.append(
                    Evidence(
                        observation_id=obs.id,
                        source=SourceKind(obs.source),
                        stance=stance,
                        statement=outcome.value,
                        check=check.id,
                    )
                )
        return out

    def reflect(self, incident: Incident, result: HypothesisResult, now: datetime) -> Lesson | None:
        if result.verdict.status != "refuted" or not result.verdict.refuting:
            return None
        first = result.verdict.refuting[0]
        step = next((s for s in result.steps if s.observation_id == first.observation_id), None)
        if step is None or step.action is None:
            return None
        h = result.hypothesis
        return Lesson(
            trigger=LessonTrigger(
                symptom=incident.symptom,
                condition=h.why[0] if h.why else h.statement,
                signals=[w for w in h.why[1:]],
            ),
            refuting_evidence=[
                Citation(observation_id=e.observation_id, value=e.statement) for e in result.verdict.refuting
            ],
            next_action=step.action,
            refuted_kind=h.kind,
            services=[h.component],
            source_incident=incident.id,
            created_at=now,
        )


#: What a hypothesis that explains nothing the beam has not explained already is still worth.
REDUNDANT = 0.2


def diverse(ranked: list[Hypothesis], weights: Mapping[str, float]) -> list[Hypothesis]:
    """Order for the beam by marginal explanation (like MMR): after the best hypothesis, prefer the
    one that accounts for the most evidence (weighted by its magnitude) the ones before it leave
    unexplained. A change and the mechanism
    it set off explain the same features; a rival explanation of the loudest symptom does not."""
    left = list(ranked)
    explained: set[str] = set()
    out: list[Hypothesis] = []
    while left:

        def worth(h: Hypothesis) -> float:
            if not h.explains:
                return h.score * REDUNDANT
            total = sum(weights.get(f, 1.0) for f in h.explains) or 1.0
            novel = sum(weights.get(f, 1.0) for f in set(h.explains) - explained) / total
            return h.score * (REDUNDANT + (1 - REDUNDANT) * novel)

        best = max(left, key=lambda h: (worth(h), -left.index(h)))
        left.remove(best)
        out.append(best)
        explained.update(best.explains)
    return out


def _fits(pattern: str, feature: str) -> bool:
    return fnmatch.fnmatchcase(feature, pattern)


# ---------------------------------------------------------------- the scripted fake

Script = Callable[[Incident, Hypothesis, Sequence[Step], Mapping[str, Observation]], Awaitable[Decision] | Decision]


@dataclass
class ScriptedReasoner:
    """A reasoner driven by a script, for tests (like pydantic-ai's FunctionModel).

    ``hypotheses`` are proposed as given; ``script`` answers every ``decide`` call, or ``decisions``
    are replayed in order (then the reasoner stops acting).
    """

    hypotheses: list[Hypothesis] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    script: Script | None = None
    name: str = "scripted"
    calls: int = 0

    def propose(
        self, incident: Incident, triage: Triage, *, k: int, lessons: Sequence[Lesson], exclude: set[str]
    ) -> list[Hypothesis]:
        return [h for h in self.hypotheses if h.id not in exclude][:k]

    def rank(
        self, incident: Incident, candidates: list[Hypothesis], triage: Triage, lessons: Sequence[Lesson]
    ) -> list[Hypothesis]:
        return sorted(candidates, key=lambda h: -h.score)

    async def decide(
        self,
        incident: Incident,
        hypothesis: Hypothesis,
        steps: Sequence[Step],
        observations: Mapping[str, Observation],
        *,
        final: bool,
    ) -> Decision:
        self.calls += 1
        if self.script is not None:
            result = self.script(incident, hypothesis, steps, observations)
            return result if isinstance(result, Decision) else await result
        if self.decisions:
            return self.decisions.pop(0)
        return Decision(thought="script finished", action=None)

    def reflect(self, incident: Incident, result: HypothesisResult, now: datetime) -> Lesson | None:
        return None
