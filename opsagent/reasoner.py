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

from opsagent import ranking
from opsagent.lessons import Retrieved, concrete, from_refutation, release_mismatch
from opsagent.models import (
    CHANGE_KINDS,
    Action,
    Evidence,
    Hypothesis,
    HypothesisResult,
    Incident,
    Lesson,
    Observation,
    SourceKind,
    Step,
    Symptom,
)
from opsagent.playbooks import Check, Context, Playbook, context_for, evaluate, fill, placeholder_values
from opsagent.triage import ComponentProfile, Triage


class Decision(BaseModel):
    thought: str
    action: Action | None
    evidence: list[Evidence] = []


class Reasoner(Protocol):
    name: str

    def propose(
        self, incident: Incident, triage: Triage, *, k: int, lessons: Sequence[Retrieved], exclude: set[str]
    ) -> list[Hypothesis]: ...

    def rank(
        self, incident: Incident, candidates: list[Hypothesis], triage: Triage, lessons: Sequence[Retrieved]
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

    def reflect(
        self, incident: Incident, result: HypothesisResult, now: datetime, observations: Mapping[str, Observation]
    ) -> Lesson | None: ...


def action_of(check: Check, hypothesis: Hypothesis, incident: Incident) -> Action:
    values = placeholder_values(hypothesis.component, incident.symptom.value, incident.service)
    args = {k: fill(v, values) if isinstance(v, str) else v for k, v in check.args.items()}
    return Action(tool=check.tool, args=args)


def track_record(agreeing: Sequence[Lesson]) -> str | None:
    """Why lessons that agree (they refuted the same kind, and their triggers show on the same component)
    stop lowering it together: between them they misled more often than they helped, though each alone
    may not have yet (a near-duplicate learned later starts with a clean record). None when they act."""
    misled = sum(le.times_misled for le in agreeing)
    helped = sum(le.times_helped for le in agreeing)
    if len(agreeing) < 2 or misled <= helped:
        return None
    return f"the {len(agreeing)} lessons that lower it here misled {misled} time(s) between them and helped {helped}"


class PlaybookReasoner:
    """Hypotheses from playbooks x triage's suspects; actions from the playbooks' checks."""

    name = "playbook"

    def __init__(self, playbooks: Sequence[Playbook]) -> None:
        self.playbooks = {p.id: p for p in playbooks}

    def propose(
        self, incident: Incident, triage: Triage, *, k: int, lessons: Sequence[Retrieved], exclude: set[str]
    ) -> list[Hypothesis]:
        suspects = [c for c in triage.components if c.score > 0 or c.component in incident.services]
        suspects = suspects[: ranking.TOP_COMPONENTS]
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
            score = ranking.hypothesis_score(book.prior, match, weight) * ranking.mechanism_fit(
                has=any(f.startswith("mech:") for f in comp.features),
                names=any(f.startswith("mech:") for f in book.explained(comp.features)),
            )
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
        self, incident: Incident, candidates: list[Hypothesis], triage: Triage, lessons: Sequence[Retrieved]
    ) -> list[Hypothesis]:
        ranked = [self._apply_lessons(h, incident, lessons, releases=triage.releases) for h in candidates]
        ranked.sort(key=lambda h: (-h.score, h.id))
        weights = {f"{c.component}/{f}": m for c in triage.components for f, m in c.features.items()}
        ordered = ranking.diverse(ranked, weights)
        # A change hypothesis verifies the mechanism it touched (a pool resized -> that pool
        # exhausted): that mechanism is the same explanation, so rivals go before it.
        chained = {h.id for h in ordered if self._set_off_by_change(h, ordered, triage)}
        return [h for h in ordered if h.id not in chained] + [h for h in ordered if h.id in chained]

    def _apply_lessons(
        self,
        h: Hypothesis,
        incident: Incident,
        lessons: Sequence[Retrieved],
        *,
        releases: Mapping[str, Sequence[str]],
    ) -> Hypothesis:
        """A lesson whose trigger shows on h's component lowers the kind it refuted there, and its next
        action, when it is one of h's checks, becomes h's first call. A refuted change kind lowers it only
        in the release it refuted (``releases``: each component's new releases out now)."""
        score, first, notes = h.score, list(h.first_actions), list(h.lesson_notes)
        planned = (
            {action_of(c, h, incident).key() for c in self.playbooks[h.playbook or ""].checks} if h.playbook else set()
        )
        pooled = track_record(
            [r.lesson for r in lessons if r.component == h.component and r.lesson.refuted_kind == h.kind]
        )
        for r in lessons:
            if r.component != h.component:
                continue
            if r.lesson.refuted_kind == h.kind and score == h.score:  # one lowering, however many agree
                elsewhere = release_mismatch(r.lesson, h.component, releases)
                if elsewhere is not None:
                    notes.append(f"{r.lesson.id}: did not lower {h.kind} on {h.component}: {elsewhere}")
                elif r.lesson.unreliable:
                    notes.append(
                        f"{r.lesson.id}: did not lower {h.kind} on {h.component}: the kind it lowered was the cause "
                        f"{r.lesson.times_misled} time(s), it helped {r.lesson.times_helped}"
                    )
                elif pooled is not None:
                    notes.append(f"{r.lesson.id}: did not lower {h.kind} on {h.component}: {pooled}")
                else:
                    score *= ranking.LESSON_PENALTY
                    notes.append(
                        f"{r.lesson.id}: lowered {h.kind} on {h.component} x{ranking.LESSON_PENALTY:g} "
                        f"(refuted before under {', '.join(r.lesson.trigger.signals)})"
                    )
            action = concrete(r.lesson.next_action, h.component)
            if action.key() in planned and all(a.key() != action.key() for a in first):
                first.append(action)
                notes.append(f"{r.lesson.id}: {action.key()} runs first for {h.kind} on {h.component}")
        if not notes:
            return h
        return h.model_copy(update={"score": round(score, 5), "first_actions": first, "lesson_notes": notes})

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
            ctx = context_for(incident, hypothesis.component, observations)
            for check, action in planned:
                if action == last.action:
                    evidence.extend(self._assess(check, obs, ctx, shown=hypothesis.explains))
        done = {s.action.key() for s in steps if s.action is not None}
        pending = [(c, a) for c, a in planned if a.key() not in done]
        first = [a.key() for a in hypothesis.first_actions]
        pending.sort(key=lambda ca: first.index(ca[1].key()) if ca[1].key() in first else len(first))
        if final or not pending:
            return Decision(
                thought="No further checks: handing the evidence to the judge.", action=None, evidence=evidence
            )
        check, action = pending[0]
        values = placeholder_values(hypothesis.component, incident.symptom.value, incident.service)
        return Decision(thought=fill(check.says, values), action=action, evidence=evidence)

    @staticmethod
    def _assess(check: Check, obs: Observation, ctx: Context, *, shown: Sequence[str] = ()) -> list[Evidence]:
        """The evidence one observation gives for a check. ``shown``: the hypothesis' triage features
        (``component/feature``), before which a refutation the check names in ``refute_unless`` does not stand."""
        if obs.source is None or not obs.ok:
            return []
        overruled = any(fnmatch.fnmatchcase(f.split("/", 1)[-1], p) for f in shown for p in check.refute_unless)
        out = []
        for stance, exp in (("supports", check.confirm), ("refutes", check.refute)):
            if exp is None or (stance == "refutes" and overruled):
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

    def reflect(
        self, incident: Incident, result: HypothesisResult, now: datetime, observations: Mapping[str, Observation]
    ) -> Lesson | None:
        return from_refutation(incident, result, now, observations)

    def first_checks(self) -> dict[str, Action]:
        """Per fault kind, the first call its playbook makes, as a template (for lessons)."""
        out: dict[str, Action] = {}
        for book in self.playbooks.values():
            check = book.checks[0]
            out.setdefault(book.kind, Action(tool=check.tool, args={k: v for k, v in check.args.items()}))
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
        self, incident: Incident, triage: Triage, *, k: int, lessons: Sequence[Retrieved], exclude: set[str]
    ) -> list[Hypothesis]:
        return [h for h in self.hypotheses if h.id not in exclude][:k]

    def rank(
        self, incident: Incident, candidates: list[Hypothesis], triage: Triage, lessons: Sequence[Retrieved]
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

    def reflect(
        self, incident: Incident, result: HypothesisResult, now: datetime, observations: Mapping[str, Observation]
    ) -> Lesson | None:
        return None
