"""Lessons (Reflexion): written from dead ends, retrieved by relevance, acting on the next investigation.

A lesson is only kept when it is concrete: a refuting observation cited with its value, and a next
action that is a valid call of a read-only tool. ``{service}`` in the action stands for the
component the trigger shows on, so what order-service taught applies to payment-service too.

Evaluators, most reliable first: the recorded truth (replay), the engineer's verdict (feedback),
and rule checks on a live report (:func:`rule_check`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from pydantic import ValidationError

from opsagent import environment
from opsagent.environment import taught
from opsagent.fixtures import Truth
from opsagent.models import (
    CHANGE_KINDS,
    Action,
    ArgValue,
    Citation,
    HypothesisResult,
    Incident,
    Lesson,
    LessonTrigger,
    LessonUse,
    MetricsData,
    Observation,
    Report,
)
from opsagent.tools import TOOLS
from opsagent.triage import ComponentProfile, Triage

PLACEHOLDER = "{service}"


def lesson_id(
    refuted_kind: str, signals: Sequence[str], action: Action, *, releases: Sequence[str] | None = None
) -> str:
    """Near-duplicates share an id: the same dead end, under the same trigger, with the same remedy (and,
    for a change kind, in the same releases: another build's refutation is another lesson). A lesson that
    names no release keeps the id it had before lessons named them."""
    basis = f"{refuted_kind}|{','.join(sorted(signals))}|{action.key()}"
    if releases is not None:
        basis += f"|releases:{','.join(sorted(releases))}"
    return "L-" + hashlib.sha1(basis.encode()).hexdigest()[:8]


def releases_refuted(kind: str, component: str, observations: Iterable[Observation]) -> list[str] | None:
    """The releases a refutation of ``kind`` on ``component`` was about: for a change kind, the component's
    new releases out in that incident (none: an empty list); for any other kind, None (not about a release)."""
    if kind not in CHANGE_KINDS:
        return None
    return sorted(environment.releases_of(observations).get(component, {}))


def unscoped(lesson: Lesson) -> str | None:
    """Why a refutation of a change kind lowers it nowhere, or None: learned before lessons named the
    release they refuted, it cannot tell which build it was about (it is kept, and its next action still
    runs first)."""
    if lesson.teaches == "refuted" and lesson.refuted_kind in CHANGE_KINDS and lesson.releases is None:
        return (
            f"it refuted {lesson.refuted_kind} before lessons named the release they refuted "
            "(name it under releases: with opsagent lessons edit)"
        )
    return None


def release_mismatch(lesson: Lesson, component: str, out_now: Mapping[str, Sequence[str]]) -> str | None:
    """Why a refutation of a change kind does not speak to ``component`` here, or None when it does: it
    was about other releases than those out now (a refuted build says nothing of the next one), or it
    names none (:func:`unscoped`)."""
    if lesson.teaches != "refuted" or lesson.refuted_kind not in CHANGE_KINDS or lesson.releases is None:
        return unscoped(lesson)
    now = sorted(out_now.get(component, []))
    if set(lesson.releases) & set(now) or (not lesson.releases and not now):
        return None
    then = f"release {', '.join(lesson.releases)}" if lesson.releases else "no new release"
    where = ", ".join(lesson.services)  # a lesson's trigger may show on another component than its own
    return f"it refuted it in {then} of {where}, and {component} has {', '.join(now) or 'no new release'} out now"


def templated(action: Action, component: str) -> Action:
    args = {k: PLACEHOLDER if v == component else v for k, v in action.args.items()}
    return Action(tool=action.tool, args=args)


def concrete(action: Action, component: str) -> Action:
    args: dict[str, ArgValue] = {
        k: v.replace(PLACEHOLDER, component) if isinstance(v, str) else v for k, v in action.args.items()
    }
    return Action(tool=action.tool, args=args)


def problems(lesson: Lesson) -> list[str]:
    """Why a lesson cannot be kept; empty when it can."""
    out = []
    spec = TOOLS.get(lesson.next_action.tool)
    if spec is None:
        out.append(f"next action {lesson.next_action.tool!r} is not a tool (one of: {', '.join(TOOLS)})")
    else:
        try:
            spec.args.model_validate(concrete(lesson.next_action, "example-service").args)
        except ValidationError as exc:
            out.append(f"next action arguments are not a concrete {spec.usage()} call: {exc.errors()[0]['msg']}")
    if not lesson.refuting_evidence:
        out.append("no refuting evidence cited")
    if not lesson.trigger.signals and not lesson.trigger.condition.strip():
        out.append("no trigger")
    return out + environment.problems(lesson)


def finalised(lesson: Lesson) -> Lesson:
    if lesson.teaches != "refuted":
        return lesson.model_copy(update={"id": environment.identity(lesson)})
    basis = lesson_id(lesson.refuted_kind, lesson.trigger.signals, lesson.next_action, releases=lesson.releases)
    return lesson.model_copy(update={"id": basis})


def _signals(result: HypothesisResult, observations: Mapping[str, Observation]) -> list[str]:
    """The situation that misled: what made the hypothesis attractive, and the anomaly that killed it
    (cpu saturation refuted because traffic tripled is a lesson about surges, not about CPU)."""
    prefix = result.hypothesis.component + "/"
    signals = {f.removeprefix(prefix) for f in result.hypothesis.explains if f.startswith(prefix)}
    for e in result.verdict.refuting:
        obs = observations.get(e.observation_id)
        if obs is not None and isinstance(obs.data, MetricsData):
            for s in obs.data.stats:
                if s.component == result.hypothesis.component and s.direction in ("up", "down"):
                    signals.add(f"signal:{s.signal}:{s.direction}")
    return sorted(signals)


def from_refutation(
    incident: Incident,
    result: HypothesisResult,
    now: datetime,
    observations: Mapping[str, Observation],
    *,
    next_action: Action | None = None,
) -> Lesson | None:
    """A refuted hypothesis as a lesson; its next action is the refuting call unless a better one is known."""
    if result.verdict.status != "refuted" or not result.verdict.refuting:
        return None
    first = result.verdict.refuting[0]
    step = next((s for s in result.steps if s.observation_id == first.observation_id), None)
    action = next_action or (step.action if step else None)
    if action is None:
        return None
    h = result.hypothesis
    signals = _signals(result, observations)
    lesson = Lesson(
        trigger=LessonTrigger(
            symptom=incident.symptom,
            condition=f"{', '.join(signals) or (h.why[0] if h.why else h.statement)} on {h.component}",
            signals=signals,
        ),
        refuting_evidence=[
            Citation(observation_id=e.observation_id, value=e.statement) for e in result.verdict.refuting
        ],
        next_action=templated(action, h.component),
        refuted_kind=h.kind,
        services=[h.component],
        source_incident=incident.id,
        created_at=now,
        releases=releases_refuted(h.kind, h.component, observations.values()),
    )
    return finalised(lesson)


def from_truth(report: Report, truth: Truth, now: datetime, *, first_checks: Mapping[str, Action]) -> list[Lesson]:
    """What a replayed incident teaches, checked against its recorded truth.

    The next action is what found the truth (the first call of the hypothesis that matched it), so
    the next investigation under the same trigger starts where this one should have."""
    found = next(
        (r for r in report.results if (r.hypothesis.component, r.hypothesis.kind) == (truth.target, truth.kind)),
        None,
    )
    remedy = found.steps[0].action if found is not None and found.steps else None
    if remedy is None and truth.kind in first_checks:
        remedy = concrete(first_checks[truth.kind], truth.target)
    out: list[Lesson] = []
    observed = {o.id: o for o in report.observations}
    for r in report.results:
        if (r.hypothesis.component, r.hypothesis.kind) == (truth.target, truth.kind):
            continue
        if r.verdict.status == "refuted":
            lesson = from_refutation(report.incident, r, now, observed, next_action=remedy)
        elif (
            r.verdict.status in ("confirmed", "probable")
            and report.root_cause is not None
            and (
                report.root_cause.component,
                report.root_cause.kind,
            )
            == (r.hypothesis.component, r.hypothesis.kind)
        ):
            lesson = _wrong_conclusion(report, r, truth, now, remedy)
        else:
            lesson = None
        if lesson is not None and not problems(lesson):
            out.append(lesson)
    return out


def about_environment(
    report: Report, cause: str, kind: str, now: datetime, *, first_checks: Mapping[str, Action]
) -> list[Lesson]:
    """What an incident whose cause is known teaches its environment (:func:`opsagent.environment.taught`):
    the cause behind the alert, and the evidence that was usual on the innocent suspects above it. The
    next action is the call that proves the cause: the playbook's first check of its kind, or a look at
    its logs where no playbook knows the kind."""
    if report.situation is None:
        return []
    remedy = (
        concrete(first_checks[kind], cause)
        if kind in first_checks
        else Action(tool="logs.summary", args={"service": cause})
    )
    out = taught(
        report.situation,
        [s.component for s in report.suspects],
        cause=cause,
        kind=kind,
        incident_id=report.incident.id,
        now=now,
        remedy=remedy,
        overturned=refuted_on_the_cause(report, cause, kind),
    )
    return [le for le in out if not problems(le)]


def refuted_on_the_cause(report: Report, cause: str, kind: str) -> dict[str, str]:
    """The checks that refuted the cause's own kind on the cause, each with its refuting observation:
    refutations the truth overturned (also where an earlier overturned lesson reopened the verdict)."""
    out: dict[str, str] = {}
    for r in report.results:
        if (r.hypothesis.component, r.hypothesis.kind) == (cause, kind) and r.verdict.status not in (
            "confirmed",
            "probable",
        ):
            for e in r.verdict.refuting:
                if e.check:
                    out.setdefault(e.check, e.observation_id)
    return out


def learn_environment(memory: LessonMemory, lessons: Sequence[Lesson], *, now: datetime) -> list[str]:
    """Store what an incident taught its environment, then forget what aged out or overflows; returns
    the ids forgotten."""
    for lesson in lessons:
        memory.upsert_lesson(lesson)
    gone = environment.forgotten(memory.lessons(), now=now)
    for lesson_id in gone:
        memory.delete_lesson(lesson_id)
    return gone


def about_the_environment(use: LessonUse) -> bool:
    """Whether a lesson used acted on the environment's evidence or priors (rather than on a kind)."""
    return bool(use.raised) or any(x.endswith("/*") for x in use.lowered)


def _wrong_conclusion(
    report: Report, r: HypothesisResult, truth: Truth, now: datetime, remedy: Action | None
) -> Lesson | None:
    """A confirmed conclusion the truth contradicts: the evidence that misled is cited against it."""
    if remedy is None or not r.verdict.supporting:
        return None
    h = r.hypothesis
    citations = [
        Citation(
            observation_id=e.observation_id, value=f"{e.statement} — yet the cause was {truth.kind} on {truth.target}"
        )
        for e in r.verdict.supporting
    ]
    signals = _signals(r, {o.id: o for o in report.observations})
    return finalised(
        Lesson(
            trigger=LessonTrigger(
                symptom=report.incident.symptom, condition=f"{', '.join(signals)} on {h.component}", signals=signals
            ),
            refuting_evidence=citations,
            next_action=templated(remedy, h.component),
            refuted_kind=h.kind,
            services=[h.component],
            source_incident=report.incident.id,
            created_at=now,
            releases=releases_refuted(h.kind, h.component, report.observations),
        )
    )


def root_cause_parts(root_cause: str, *, kinds: Iterable[str]) -> tuple[str, str]:
    """``SERVICE/KIND`` (or ``SERVICE KIND``) as its two parts; a ValueError naming the kinds a
    playbook knows when it is not that."""
    known = sorted(kinds)
    service, _, kind = root_cause.strip().replace(" ", "/").partition("/")
    if not service or kind not in known:
        raise ValueError(f'--root-cause must read "service/kind" with a kind a playbook knows ({", ".join(known)})')
    return service, kind


def from_feedback(
    report: Report, root_cause: str, now: datetime, *, first_checks: Mapping[str, Action]
) -> Lesson | None:
    """An engineer's "wrong, it was SERVICE/KIND" as a lesson against the conclusion that misled."""
    service, kind = root_cause_parts(root_cause, kinds=first_checks)
    winner = next(
        (
            r
            for r in report.results
            if report.root_cause is not None
            and (r.hypothesis.component, r.hypothesis.kind) == (report.root_cause.component, report.root_cause.kind)
        ),
        None,
    )
    if winner is None:
        return None
    truth = Truth(service=service, kind=kind, summary="the on-call engineer's verdict")
    return _wrong_conclusion(report, winner, truth, now, concrete(first_checks[kind], service))


# ---------------------------------------------------------------- memory


#: What a lesson's use is counted as: retrieved by an investigation; in one whose conclusion was right
#: (it helped); in one where a kind it lowered turned out to be the cause (it misled).
LessonCounter = Literal["retrieved", "helped", "misled"]


def misled_by(uses: Sequence[LessonUse], service: str, kind: str, *, top: str | None = None) -> list[str]:
    """The lessons that lowered the hypothesis that was the cause (``service``/``kind``), or any
    evidence of the cause, or raised the prior of the top suspect (``top``) when it was not the cause."""
    lowered = (f"{service}/{kind}", f"{service}/*")
    return [
        u.lesson_id
        for u in uses
        if any(x in u.lowered for x in lowered) or (top is not None and top != service and top in u.raised)
    ]


class LessonMemory(Protocol):
    """Where lessons live: the SQLite :class:`~opsagent.store.Store`, or memory for experiments."""

    def lessons(self) -> list[Lesson]: ...

    def upsert_lesson(self, lesson: Lesson) -> tuple[Lesson, bool]: ...

    def count_use(self, lesson_ids: list[str], *, counter: LessonCounter = "retrieved") -> None: ...

    def delete_lesson(self, lesson_id: str) -> None: ...


class InMemoryLessons:
    def __init__(self, lessons: Sequence[Lesson] = ()) -> None:
        self._by_id: dict[str, Lesson] = {}
        for lesson in lessons:
            self.upsert_lesson(lesson)

    def lessons(self) -> list[Lesson]:
        return sorted(self._by_id.values(), key=lambda le: (le.created_at, le.id), reverse=True)

    def upsert_lesson(self, lesson: Lesson) -> tuple[Lesson, bool]:
        stored = self._by_id.get(lesson.id)
        merged = lesson if stored is None else merge(stored, lesson)
        self._by_id[lesson.id] = merged
        return merged, stored is not None

    def delete_lesson(self, lesson_id: str) -> None:
        self._by_id.pop(lesson_id, None)

    def count_use(self, lesson_ids: list[str], *, counter: LessonCounter = "retrieved") -> None:
        field = f"times_{counter}"
        for lid in lesson_ids:
            if lid in self._by_id:
                le = self._by_id[lid]
                self._by_id[lid] = le.model_copy(update={field: getattr(le, field) + 1})


def merge(stored: Lesson, new: Lesson) -> Lesson:
    """One lesson out of two near-duplicates: counts add up, where it was seen accumulates."""
    seen = list(dict.fromkeys([*stored.seen_in, stored.source_incident, *new.seen_in, new.source_incident]))
    both = [*new.refuting_evidence, *stored.refuting_evidence]
    citations = list({c.observation_id + c.value: c for c in both}.values())
    strengths = [s for s in (stored.strength, new.strength) if s is not None]
    last = [t for t in (stored.last_seen, new.last_seen) if t is not None]
    return stored.model_copy(
        update={
            "count": stored.count + new.count,
            "seen_in": seen,
            "services": sorted({*stored.services, *new.services}),
            "refuting_evidence": citations[:5],
            # an environment lesson: the strongest its component showed innocent, where it was last seen
            "strength": max(strengths) if strengths else None,
            "last_seen": max(last) if last else None,
            "environment": sorted({*stored.environment, *new.environment}),
        }
    )


# ---------------------------------------------------------------- retrieval


@dataclass(frozen=True)
class Retrieved:
    lesson: Lesson
    relevance: float
    component: str | None = None  # where its trigger shows, if it does

    @property
    def applies(self) -> bool:
        return self.component is not None


def trigger_present(lesson: Lesson, profile: ComponentProfile) -> bool:
    return bool(lesson.trigger.signals) and all(s in profile.features for s in lesson.trigger.signals)


def relevance(lesson: Lesson, incident: Incident, profile: ComponentProfile) -> float:
    signals = lesson.trigger.signals
    if not signals:
        return 0.0
    overlap = sum(1 for s in signals if s in profile.features) / len(signals)
    same_service = 0.25 if profile.component in lesson.services else 0.0
    same_symptom = 0.15 if lesson.trigger.symptom == incident.symptom else 0.0
    return round(overlap + (same_service + same_symptom) * overlap, 4)


def retrieve(
    lessons: Sequence[Lesson], incident: Incident, triage: Triage, *, top_k: int = 3, cap: int = 5
) -> list[Retrieved]:
    """Top-k lessons by relevance to this incident's triage, plus the most recent, at most ``cap``."""
    lessons = [le for le in lessons if le.teaches == "refuted"]  # the others act on triage (opsagent.environment)
    if not lessons or cap == 0:
        return []
    suspects = triage.components[:8]
    scored: list[Retrieved] = []
    for lesson in lessons:
        best = max(((relevance(lesson, incident, p), p) for p in suspects), key=lambda x: x[0], default=(0.0, None))
        score, profile = best
        where = profile.component if profile is not None and trigger_present(lesson, profile) else None
        scored.append(Retrieved(lesson=lesson, relevance=score, component=where))
    relevant = sorted((r for r in scored if r.relevance > 0), key=lambda r: (-r.relevance, r.lesson.id))[:top_k]
    recent = sorted(scored, key=lambda r: (r.lesson.created_at, r.lesson.id), reverse=True)
    chosen = {r.lesson.id: r for r in relevant}
    for r in recent:
        if len(chosen) >= cap:
            break
        chosen.setdefault(r.lesson.id, r)
    return sorted(chosen.values(), key=lambda r: (-r.relevance, r.lesson.id))


# ---------------------------------------------------------------- live evaluation


def rule_check(report: Report) -> list[str]:
    """Why a live conclusion is not to be trusted for learning; empty when it passes.

    The cited evidence must exist, and the conclusion must name a signal, a time and a causal chain."""
    issues = []
    observed = {o.id for o in report.observations}
    missing = [e.observation_id for e in report.evidence if e.observation_id not in observed]
    if missing:
        issues.append(f"cites observations that do not exist: {', '.join(missing)}")
    if report.root_cause is not None:
        if not any(e.source.value == "metrics" for e in report.evidence) and not report.evidence:
            issues.append("names no signal")
        if not any(t.kind in ("change", "symptom") for t in report.timeline):
            issues.append("names no time before the onset or symptom")
        if len({e.source for e in report.evidence}) < 2 and report.status == "confirmed":
            issues.append("no causal chain across two kinds of evidence")
    return issues
