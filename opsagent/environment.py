"""Environment memory: what a system's past incidents taught about it, acting on its next ones.

Two kinds of lesson are learned from an incident whose cause is known (a replay's truth, an
engineer's ``feedback``), beside the lessons about refuted hypotheses of :mod:`opsagent.lessons`:

* ``usual`` — evidence (a triage feature: a detector's finding, a metric shift, a log burst) that a
  component showed while it was innocent. Where the same component shows the same feature again, in
  the same environment, only what goes beyond that usual level counts, and at most half of it is
  discounted: a lesson raises what counts as surprising there, it never hides evidence.
* ``culprit`` — a component that was the cause behind an alert. The next time the alert fires there,
  the component gets a prior: a share of the best suspect's score, by how often, and how recently,
  it was the cause there.
* ``noise`` and ``telling`` — a detector (a triage feature, whichever component shows it) that showed
  on an innocent leading suspect, and one the cause showed. A detector that showed on innocent
  leading suspects in several incidents of an environment and less often on the cause is that
  environment's everyday noise: wherever it shows there, it counts less (at most half less).
* ``overturned`` — a check whose refutation of a kind on a component the truth overturned (that
  component was the cause, with that kind; in that release where it had one). Where the same check
  refutes the same kind on the same component (in the same release) again, the refutation is not taken
  as settled: the verdict is reopened (inconclusive), the refuting evidence stays in it, and the report
  says which lesson and which earlier incidents.

A lesson acts only in its own environment (most of the components it was learned among are
components of this incident) and stops acting once it misled more often than it helped; every
effect is a :class:`~opsagent.models.LessonEffect` the report shows with the lesson that made it.
This module reads lessons and the incident's own evidence; it never sees a truth.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from opsagent.kubestate import replicaset_of
from opsagent.models import (
    Action,
    ChangeRecord,
    ChangesData,
    Citation,
    HypothesisResult,
    Incident,
    KubernetesData,
    Lesson,
    LessonEffect,
    LessonTrigger,
    LessonUse,
    Observation,
    Situation,
    Suspect,
    VersionsData,
)
from opsagent.ranking import CHANGE_FEATURES

#: A lesson acts where at least this share of the components it was learned among (and of this
#: incident's) are the same (Jaccard overlap): another system's lessons stay out.
SAME_ENVIRONMENT = 0.5
#: A usual level acts once a component was seen innocent with the feature in this many incidents.
USUAL_MIN_SEEN = 2
#: The most of a feature's magnitude a usual level may discount.
MAX_DISCOUNT = 0.5
#: A component that was the cause behind every recent alert of this kind gains this share of the best
#: suspect's score; one among several, its share of that.
PRIOR_WEIGHT = 1.0
#: What was the cause this many causes ago counts half as much as the latest.
PRIOR_HALF_LIFE = 4.0
#: Causes behind another alert of the same environment count this much.
OTHER_ALERT = 0.5
#: The prior grows to its full weight over this many incidents with a known cause.
PRIOR_HISTORY = 3.0
#: Innocent components ranked above the cause (at most this many) teach what is usual, each with its
#: strongest features (at most USUAL_FEATURES).
LEARN_ABOVE, USUAL_FEATURES = 5, 3
#: Features a situation keeps per component (the strongest).
SITUATION_FEATURES = 8
#: A usual lesson about a release names it as this prefix and the release (``release:<replicaset>``).
RELEASE = "release:"
#: The change kinds that put a new release out.
ROLLOUT_KINDS = ("deploy", "rollout")
#: A release counts as vetted once it ran through this many earlier incidents whose cause was elsewhere.
RELEASE_MIN_SEEN = 1
#: A detector counts as noise once it showed on an innocent leading suspect in this many
#: incidents of the environment.
NOISE_MIN_SEEN = 3


def alert_of(incident: Incident) -> str:
    """The alert, as lessons name it: alertname@service."""
    return f"{incident.labels.get('alertname', 'alert')}@{incident.service}"


def overlap(a: Iterable[str], b: Iterable[str]) -> float:
    first, second = set(a), set(b)
    union = first | second
    return len(first & second) / len(union) if union else 0.0


# ---------------------------------------------------------------- what an incident teaches


def signature(scores: Mapping[str, float], features: Mapping[str, Mapping[str, float]]) -> list[str]:
    """A situation in brief, as a culprit lesson records it: the leading suspects (LEARN_ABOVE, by score) with their
    strongest features (USUAL_FEATURES), as ``component/feature``."""
    leading = sorted((c for c, v in scores.items() if v > 0), key=lambda c: (-scores[c], c))[:LEARN_ABOVE]
    out: list[str] = []
    for c in leading:
        own = features.get(c, {})
        strongest = sorted((f for f, m in own.items() if m > 0), key=lambda f: (-own[f], f))[:USUAL_FEATURES]
        out.extend(f"{c}/{f}" for f in strongest)
    return sorted(out)


def situation_of(
    incident: Incident,
    components: Sequence[str],
    features: Mapping[str, Mapping[str, float]],
    evidence: Mapping[str, Mapping[str, str]],
    effects: Sequence[LessonEffect] = (),
    releases: Mapping[str, Mapping[str, str]] | None = None,
) -> Situation:
    """The situation an investigation saw, with each feature at its magnitude before any lesson lowered
    it (so what a later incident learns does not depend on the lessons this one used)."""
    before = {(e.component, e.feature): e.before for e in effects if e.effect == "lowered" and e.feature}
    kept: dict[str, dict[str, float]] = {}
    seen: dict[str, dict[str, str]] = {}
    for c in sorted(features):
        raw = {f: before.get((c, f), m) for f, m in features[c].items() if m > 0}
        strongest = sorted(raw.items(), key=lambda kv: (-kv[1], kv[0]))[:SITUATION_FEATURES]
        if strongest:
            kept[c] = {f: round(m, 4) for f, m in strongest}
            seen[c] = {f: evidence.get(c, {}).get(f, "") for f, _ in strongest}
    return Situation(
        alert=alert_of(incident),
        symptom=incident.symptom,
        components=sorted(components),
        evidence=kept,
        observations=seen,
        releases={c: dict(sorted(r.items())) for c, r in sorted((releases or {}).items()) if r},
    )


def taken_down_by(observations: Iterable[Observation]) -> dict[str, str]:
    """Each component a broken Kubernetes object leaves without a ready pod (as
    :func:`opsagent.features.out_of_service` reads them), with that object's component, where the two
    differ (a workload broken by itself is not taken down)."""
    out: dict[str, str] = {}
    for obs in observations:
        if obs.ok and isinstance(obs.data, KubernetesData):
            for finding in obs.data.findings:
                for victim in finding.affects:
                    if victim != finding.component:
                        out.setdefault(victim, finding.component)
    return out


def releases_of(observations: Iterable[Observation]) -> dict[str, dict[str, str]]:
    """Each component's new release in this incident (the ReplicaSets of its new version's pods: those the
    canary comparison found, else those its rollout names), with the observation that shows it. The old
    version's ReplicaSets (its pods the comparison found) are not a new release. A version name alone
    (``v2``) is no release: every rollout may carry it; a ReplicaSet is one build of one pod template."""
    observations = [o for o in observations if o.ok]
    old: dict[str, set[str]] = {}
    named: list[tuple[str, str, str]] = []
    for obs in observations:
        if isinstance(obs.data, VersionsData):
            old.setdefault(obs.data.service, set()).update(
                rs for rs in map(replicaset_of, obs.data.old_pods) if rs is not None
            )
            named += [(obs.data.service, pod, obs.id) for pod in obs.data.new_pods]
        elif isinstance(obs.data, ChangesData):
            named += [(c.service, pod, obs.id) for c in obs.data.changes for pod in rollout_pods(c)]
    out: dict[str, dict[str, str]] = {}
    for service, pod, obs_id in named:
        rs = replicaset_of(pod)
        if rs is not None and rs not in old.get(service, set()):
            out.setdefault(service, {}).setdefault(rs, obs_id)
    return out


def rollout_pods(change: ChangeRecord) -> list[str]:
    """The pods a rollout started of its new version: those its record lists (``pods``, its steps'), else
    those its summaries name (``… creates checkout-7d9f8c6b5-x2x9q``) as pods of its service. A new
    version that no metric has seen yet (``version:unseen``) is known by these alone."""
    if change.kind not in ROLLOUT_KINDS:
        return []
    listed = [*change.pods.get(change.to_version or "", []), *(p for s in change.steps for p in s.pods)]
    if listed:
        return sorted(set(listed))
    texts = [change.summary, *(s.summary or "" for s in change.steps)]
    named = {w.strip(",;.()") for text in texts for w in text.split()}
    return sorted(w for w in named if w.startswith(f"{change.service}-"))


def _id(*parts: str) -> str:
    return "L-" + hashlib.sha1("|".join(parts).encode()).hexdigest()[:8]


def identity(lesson: Lesson) -> str:
    """An environment lesson's id: near-duplicates (the same cause behind the same alert; the same
    evidence usual on the same component under it) share it and merge."""
    if lesson.teaches == "culprit":
        return _id("culprit", lesson.trigger.alert or "", lesson.component or "")
    if lesson.teaches in ("noise", "telling"):
        return _id(lesson.teaches, lesson.trigger.alert or "", lesson.feature or "")
    if lesson.teaches == "overturned":
        return _id(
            "overturned",
            lesson.trigger.alert or "",
            lesson.component or "",
            lesson.feature or "",
            *lesson.trigger.signals,
        )
    return _id("usual", lesson.trigger.alert or "", lesson.component or "", lesson.feature or "")


def about_a_detector(lesson: Lesson) -> bool:
    """A noise or telling lesson: about a detector wherever it shows, not about one component."""
    return lesson.teaches in ("noise", "telling")


def problems(lesson: Lesson) -> list[str]:
    """Why an environment lesson cannot act; empty when it can (or when it is not one)."""
    if lesson.teaches == "refuted":
        return []
    out = []
    if not lesson.component and not about_a_detector(lesson):
        out.append(f"a {lesson.teaches} lesson names no component")
    if not lesson.trigger.alert:
        out.append(f"a {lesson.teaches} lesson names no alert (alertname@service)")
    if not lesson.environment:
        out.append(f"a {lesson.teaches} lesson names no environment (the components it was learned among)")
    if lesson.teaches == "overturned" and "/" not in (lesson.feature or ""):
        out.append("an overturned lesson needs the kind and the check whose refutation was overturned (kind/check)")
    elif lesson.teaches in ("usual", "noise", "telling") and (
        not lesson.feature or lesson.strength is None or lesson.strength < 0
    ):
        out.append(f"a {lesson.teaches} lesson needs the feature and the strength (>= 0) it showed")
    return out


def contradictions(lessons: Iterable[Lesson]) -> list[tuple[Lesson, Lesson]]:
    """Pairs that contradict each other: evidence said to be usual on a component, which the same
    component showed when it was the cause behind the same alert. Neither is dropped; the usual
    level stops acting on that evidence (:meth:`EnvironmentMemory.calibrate`)."""
    lessons = list(lessons)
    causes: dict[tuple[str | None, str | None], list[Lesson]] = {}
    for le in lessons:
        if le.teaches == "culprit" and le.component:
            causes.setdefault((le.component, le.trigger.alert), []).append(le)
    return [
        (le, cause)
        for le in lessons
        if le.teaches == "usual" and le.component
        for cause in causes.get((le.component, le.trigger.alert), [])
        if f"{le.component}/{le.feature}" in cause.trigger.signals
    ]


def taught(
    situation: Situation,
    suspects: Sequence[str],
    *,
    cause: str,
    kind: str,
    incident_id: str,
    now: datetime,
    remedy: Action,
    overturned: Mapping[str, str] | None = None,
) -> list[Lesson]:
    """What an incident whose cause is known teaches its environment: the cause was ``cause`` (a
    culprit lesson), and the evidence of the innocent suspects ranked above it was usual there.

    ``suspects``: the report's components in its order; ``remedy``: the call that proves the cause;
    ``overturned``: the checks that refuted ``kind`` on the cause here, each with its refuting observation."""
    trigger = LessonTrigger(symptom=situation.symptom, condition="", alert=situation.alert)
    order = {c: float(len(suspects) - n) for n, c in enumerate(dict.fromkeys(suspects))}
    seen = signature(order, situation.evidence) + sorted(
        f"{cause}/{RELEASE}{rs}" for rs in situation.releases.get(cause, {})
    )
    shown = situation.evidence.get(cause, {})
    strongest = sorted(shown.items(), key=lambda kv: (-kv[1], kv[0]))[:USUAL_FEATURES]
    cited = [
        Citation(observation_id=situation.observations[cause][f], value=f"{f} {m:.2f} on {cause}")
        for f, m in strongest
        if situation.observations.get(cause, {}).get(f)
    ] or [Citation(observation_id=incident_id, value=f"the cause was {kind} on {cause}")]
    out = [
        Lesson(
            id="",
            teaches="culprit",
            component=cause,
            trigger=trigger.model_copy(
                update={
                    "condition": f"{cause} was the cause ({kind}) behind {situation.alert} where "
                    + (", ".join(seen) or "nothing stood out"),
                    "signals": seen,
                }
            ),
            refuting_evidence=cited,
            next_action=remedy,
            refuted_kind="",  # it refuted nothing: the kind it was is in its condition
            services=[cause],
            source_incident=incident_id,
            created_at=now,
            last_seen=now,
            environment=list(situation.components),
        )
    ]
    out = [le.model_copy(update={"id": identity(le)}) for le in out]
    above = list(dict.fromkeys(suspects))
    above = above[: above.index(cause)] if cause in above else above
    for c in above[:LEARN_ABOVE]:
        features = situation.evidence.get(c, {})
        for f, m in sorted(features.items(), key=lambda kv: (-kv[1], kv[0]))[:USUAL_FEATURES]:
            obs = situation.observations.get(c, {}).get(f)
            if not obs:
                continue
            out.append(
                Lesson(
                    id="",
                    teaches="usual",
                    component=c,
                    feature=f,
                    strength=round(m, 4),
                    trigger=trigger.model_copy(
                        update={"condition": f"{f} at {m:.2f} on {c}, which was innocent", "signals": [f]}
                    ),
                    refuting_evidence=[
                        Citation(observation_id=obs, value=f"{f} {m:.2f} on {c} — yet the cause was {kind} on {cause}")
                    ],
                    next_action=remedy,
                    refuted_kind="",
                    services=[c],
                    source_incident=incident_id,
                    created_at=now,
                    last_seen=now,
                    environment=list(situation.components),
                )
            )
    out += release_lessons(situation, cause=cause, kind=kind, base=out[0])
    leading = [c for c in list(dict.fromkeys(suspects))[:LEARN_ABOVE] if c != cause]
    out += detector_lessons(situation, leading, cause=cause, kind=kind, base=out[0])
    released = sorted(situation.releases.get(cause, {}))
    out += overturned_lessons(overturned or {}, released, cause=cause, kind=kind, base=out[0])
    return [le.model_copy(update={"id": identity(le)}) for le in out]


def overturned_lessons(
    refuted_by: Mapping[str, str], releases: Sequence[str], *, cause: str, kind: str, base: Lesson
) -> list[Lesson]:
    """An ``overturned`` lesson for each check that refuted the cause's own kind on the cause (feature
    ``kind/check``; ``refuted_by``: check -> the refuting observation), naming the cause's new releases
    (``releases``, in its signals as ``release:<replicaset>``). The truth overturned that refutation: next
    time the same check refutes the same kind there (on the same release, where it names one), it is not
    taken as settled (:meth:`EnvironmentMemory.reopen`). ``base``: the incident's culprit lesson."""
    return [
        base.model_copy(
            update={
                "teaches": "overturned",
                "component": cause,
                "feature": f"{kind}/{check}",
                "strength": None,
                "services": [cause],
                "trigger": base.trigger.model_copy(
                    update={
                        "condition": f"{check} refuted {kind} on {cause}, which was the cause"
                        + (f" (release {', '.join(releases)})" if releases else ""),
                        "signals": [check, *(f"{RELEASE}{rs}" for rs in releases)],
                    }
                ),
                "refuting_evidence": [
                    Citation(observation_id=obs, value=f"{check} refuted {kind} on {cause} — yet {cause} was the cause")
                ],
            }
        )
        for check, obs in sorted(refuted_by.items())
    ]


def release_lessons(situation: Situation, *, cause: str, kind: str, base: Lesson) -> list[Lesson]:
    """A ``usual`` lesson for each release of an innocent component that ran through this incident
    (feature ``release:<replicaset>``): the release was out and the cause was elsewhere. Where the same
    release is out again, its component's change evidence counts less (:meth:`EnvironmentMemory.calibrate`).
    ``base``: the incident's culprit lesson (trigger, next action)."""
    out = []
    for c, releases in sorted(situation.releases.items()):
        if c == cause:
            continue
        for rs, obs in sorted(releases.items()):
            out.append(
                base.model_copy(
                    update={
                        "teaches": "usual",
                        "component": c,
                        "feature": f"{RELEASE}{rs}",
                        "strength": MAX_DISCOUNT,
                        "services": [c],
                        "trigger": base.trigger.model_copy(
                            update={"condition": f"release {rs} of {c} was out, and innocent", "signals": [RELEASE]}
                        ),
                        "refuting_evidence": [
                            Citation(
                                observation_id=obs, value=f"{rs} of {c} was out — yet the cause was {kind} on {cause}"
                            )
                        ],
                    }
                )
            )
    return out


def detector_lessons(
    situation: Situation, leading: Sequence[str], *, cause: str, kind: str, base: Lesson
) -> list[Lesson]:
    """Which detectors told the truth here and which did not: a ``telling`` lesson for each feature the
    cause showed, a ``noise`` lesson for each feature an innocent leading suspect (``leading``) showed
    (once per incident, at its strongest). ``base``: the incident's culprit lesson (trigger, next action).

    Measured: learning noise only from the innocents ranked above the cause (the wrong incidents) changed
    no top suspect on the development sets; the leading innocents of every incident did."""
    shown = situation.evidence.get(cause, {})
    misled: dict[str, tuple[float, str, str]] = {}
    for c in leading:
        for f, m in situation.evidence.get(c, {}).items():
            obs = situation.observations.get(c, {}).get(f)
            if obs and m > misled.get(f, (0.0, "", ""))[0]:
                misled[f] = (m, c, obs)
    out = []
    for f, m in sorted(shown.items()):
        obs = situation.observations.get(cause, {}).get(f)
        if not obs:
            continue
        out.append(
            base.model_copy(
                update={
                    "teaches": "telling",
                    "component": None,
                    "feature": f,
                    "strength": round(m, 4),
                    "trigger": base.trigger.model_copy(
                        update={"condition": f"{f} at {m:.2f} on the cause ({kind} on {cause})", "signals": [f]}
                    ),
                    "refuting_evidence": [Citation(observation_id=obs, value=f"{f} {m:.2f} on {cause}, the cause")],
                }
            )
        )
    for f, (m, c, obs) in sorted(misled.items()):
        out.append(
            base.model_copy(
                update={
                    "teaches": "noise",
                    "component": None,
                    "feature": f,
                    "strength": round(m, 4),
                    "services": [c],
                    "trigger": base.trigger.model_copy(
                        update={"condition": f"{f} at {m:.2f} on {c}, a leading suspect but innocent", "signals": [f]}
                    ),
                    "refuting_evidence": [
                        Citation(observation_id=obs, value=f"{f} {m:.2f} on {c} — yet the cause was {kind} on {cause}")
                    ],
                }
            )
        )
    return out


def named_as_reopened(suspects: Sequence[Suspect], reopened: Sequence[LessonEffect]) -> list[Suspect]:
    """Each suspect not proven whose component had a refutation reopened (:meth:`EnvironmentMemory.reopen`)
    names the reopened kind, saying why: its history showed that kind, the same check refuting it, when it
    was the cause, while the kind it named has no such history (measured on a release the canary comparison
    found no worse, which was the cause: a prior put its component first, under a latency kind). Its place
    and score are unchanged: this names a kind, it moves no suspect."""
    kinds: dict[str, LessonEffect] = {}
    for effect in sorted(reopened, key=lambda e: (e.lesson_id, e.component)):
        if effect.effect == "reopened" and effect.feature:
            kinds.setdefault(effect.component, effect)
    out = []
    for s in suspects:
        found = kinds.get(s.component)
        if found is None or s.status in ("confirmed", "probable") or (found.feature or "").startswith(f"{s.kind}/"):
            out.append(s)
            continue
        kind = (found.feature or "").split("/", 1)[0]
        why = f"{found.why} (lesson {found.lesson_id})"
        out.append(s.model_copy(update={"kind": kind, "status": "inconclusive", "why": why}))
    return out


# ---------------------------------------------------------------- forgetting

#: An environment lesson no incident has taught again for this long is forgotten: the system changed.
MAX_AGE = timedelta(days=180)
#: The most environment lessons kept per alert (the most recently taught): retrieval stays fast and a
#: system's memory stays about its present.
CAP_PER_ALERT = 300


def forgotten(lessons: Iterable[Lesson], *, now: datetime) -> list[str]:
    """The environment lessons to forget: aged (not taught again for MAX_AGE) or beyond the cap of
    their alert. Lessons about refuted kinds are capped elsewhere (people edit them)."""
    mine = [le for le in lessons if le.teaches != "refuted"]
    out = {le.id for le in mine if now - (le.last_seen or le.created_at) > MAX_AGE}
    by_alert: dict[str, list[Lesson]] = {}
    for le in mine:
        if le.id not in out:
            by_alert.setdefault(le.trigger.alert or "", []).append(le)
    for group in by_alert.values():
        group.sort(key=lambda le: (le.last_seen or le.created_at, le.count, le.id), reverse=True)
        out.update(le.id for le in group[CAP_PER_ALERT:])
    return sorted(out)


# ---------------------------------------------------------------- what the memory does


def _held(lesson: Lesson, value: float, why: str) -> LessonEffect:
    """A usual-level lesson that changed nothing on its evidence, and why (``why`` after the feature)."""
    return LessonEffect(
        lesson_id=lesson.id,
        component=lesson.component,
        effect="held",
        feature=lesson.feature,
        before=value,
        after=value,
        why=f"not applied to {lesson.feature} on {lesson.component}: {why}",
    )


@dataclass
class EnvironmentMemory:
    """The environment lessons an investigation may use, and the one hook triage calls:
    :meth:`calibrate` (usual levels) then :meth:`prior` (culprits)."""

    lessons: Sequence[Lesson]
    incident: Incident
    _here: list[Lesson] | None = field(default=None, init=False)

    @classmethod
    def of(cls, lessons: Iterable[Lesson], incident: Incident) -> EnvironmentMemory:
        return cls([le for le in lessons if le.teaches != "refuted" and not le.unreliable], incident)

    def here(self, components: Iterable[str]) -> list[Lesson]:
        """The lessons learned in this environment (most components the same), once per investigation."""
        if self._here is None:
            mine = set(components)
            self._here = [
                le
                for le in self.lessons
                if (le.component in mine or about_a_detector(le)) and overlap(le.environment, mine) >= SAME_ENVIRONMENT
            ]
        return self._here

    def calibrate(
        self,
        features: MutableMapping[str, dict[str, float]],
        components: Iterable[str],
        *,
        releases: Mapping[str, Mapping[str, str]] | None = None,
    ) -> list[LessonEffect]:
        """Lower each feature a component usually shows while innocent here by that usual level, by at
        most MAX_DISCOUNT of it; and the change evidence of a release (``releases``, :func:`releases_of`)
        that ran through earlier incidents whose cause was elsewhere. Changes ``features`` in place;
        returns what it did."""
        effects = []
        here = self.here(components)
        contradicted = {usual.id: cause for usual, cause in contradictions(here)}
        effects += self.vetted(features, here, releases or {}, contradicted)
        released = {(e.component, e.feature) for e in effects}
        levels = [
            le
            for le in here
            if le.teaches == "usual"
            and le.count >= USUAL_MIN_SEEN
            and le.component is not None
            and le.feature is not None
            and le.strength is not None
            and not le.feature.startswith(RELEASE)
        ]
        # The same evidence can be usual on a component under several alerts (a lesson per alert): one level
        # acts, the highest (ties: the lowest id), so that together they never discount more than half. A
        # contradicted lesson does not speak (it holds off, below).
        speaks: dict[tuple[str | None, str | None], Lesson] = {}
        for le in sorted(levels, key=lambda le: (-(le.strength or 0.0), le.id)):
            if le.id not in contradicted:
                speaks.setdefault((le.component, le.feature), le)
        for le in sorted(levels, key=lambda le: le.id):
            if le.component is None or le.feature is None or (le.component, le.feature) in released:
                continue
            own = features.get(le.component, {})
            value = own.get(le.feature)
            if not value or le.strength is None:
                continue
            level = speaks.get((le.component, le.feature))
            if level is not None and level.id != le.id and le.id not in contradicted:
                effects.append(
                    _held(
                        le,
                        value,
                        f"lesson {level.id} sets its usual level there ({level.strength:.2f}, under "
                        f"{level.trigger.alert}); one level acts per evidence",
                    )
                )
                continue
            if le.id in contradicted:
                cause = contradicted[le.id]
                effects.append(
                    _held(
                        le,
                        value,
                        f"lesson {cause.id} says {le.component} showed it when it was the cause behind "
                        f"{cause.trigger.alert}",
                    )
                )
                continue
            after = round(value - min(le.strength, MAX_DISCOUNT * value), 4)
            own[le.feature] = after
            effects.append(
                LessonEffect(
                    lesson_id=le.id,
                    component=le.component,
                    effect="lowered",
                    feature=le.feature,
                    before=value,
                    after=after,
                    why=f"lowered {le.feature} on {le.component} from {value:.2f} to {after:.2f}: in {le.count} "
                    f"earlier incidents it showed up to {le.strength:.2f} there while the cause was elsewhere",
                )
            )
        lowered = {(e.component, e.feature) for e in effects}
        return effects + self.quieten(features, here, lowered)

    def vetted(
        self,
        features: MutableMapping[str, dict[str, float]],
        here: Sequence[Lesson],
        releases: Mapping[str, Mapping[str, str]],
        contradicted: Mapping[str, Lesson],
    ) -> list[LessonEffect]:
        """Lower by MAX_DISCOUNT the change evidence (``change:*``, ``version:*``) of a component whose
        release in this incident ran through RELEASE_MIN_SEEN earlier incidents whose cause was elsewhere:
        a build already out while something else broke is not what is new here. A release that was the
        cause behind the same alert (a culprit lesson names it) is not vetted: the report says so."""
        effects: list[LessonEffect] = []
        for le in sorted(here, key=lambda le: le.id):
            if le.teaches != "usual" or le.component is None or not (le.feature or "").startswith(RELEASE):
                continue
            rs = (le.feature or "")[len(RELEASE) :]
            own = features.get(le.component, {})
            done = {e.feature for e in effects if e.component == le.component}  # once per feature, whatever the release
            shown = sorted(f for f, m in own.items() if m > 0 and f.startswith(CHANGE_FEATURES) and f not in done)
            if rs not in releases.get(le.component, {}) or le.count < RELEASE_MIN_SEEN or not shown:
                continue
            if le.id in contradicted:
                cause = contradicted[le.id]
                for f in shown:
                    effects.append(
                        LessonEffect(
                            lesson_id=le.id,
                            component=le.component,
                            effect="held",
                            feature=f,
                            before=own[f],
                            after=own[f],
                            why=f"not applied to {f} on {le.component}: lesson {cause.id} says release {rs} was the "
                            f"cause behind {cause.trigger.alert}",
                        )
                    )
                continue
            for f in shown:
                before = own[f]
                own[f] = round(before * (1 - MAX_DISCOUNT), 4)
                effects.append(
                    LessonEffect(
                        lesson_id=le.id,
                        component=le.component,
                        effect="lowered",
                        feature=f,
                        before=before,
                        after=own[f],
                        why=f"lowered {f} on {le.component} from {before:.2f} to {own[f]:.2f}: its release {rs} was "
                        f"out in {le.count} earlier incident(s) while the cause was elsewhere",
                    )
                )
        return effects

    def quieten(
        self,
        features: MutableMapping[str, dict[str, float]],
        here: Sequence[Lesson],
        lowered: set[tuple[str, str | None]],
    ) -> list[LessonEffect]:
        """Lower each detector that is this environment's everyday noise, on every component that shows
        it: by MAX_DISCOUNT times (n - t) / n, where n incidents saw it on an innocent leading suspect and
        t saw it on the cause (none when t >= n). A feature a usual lesson already lowered on a component
        keeps that (the more specific) level. Changes ``features`` in place."""
        misled: dict[str, list[Lesson]] = {}
        told: dict[str, int] = {}
        for le in here:
            if le.teaches == "noise" and le.feature:
                misled.setdefault(le.feature, []).append(le)
            elif le.teaches == "telling" and le.feature:
                told[le.feature] = told.get(le.feature, 0) + le.count
        effects = []
        for f, lessons in sorted(misled.items()):
            n = sum(le.count for le in lessons)
            share = (n - told.get(f, 0)) / n
            if n < NOISE_MIN_SEEN or share <= 0:
                continue
            le = max(lessons, key=lambda le: (le.count, le.id))  # the alert it was seen most under speaks for it
            for c in sorted(features):
                value = features[c].get(f)
                if not value or (c, f) in lowered:
                    continue
                after = round(value * (1 - MAX_DISCOUNT * share), 4)
                features[c][f] = after
                effects.append(
                    LessonEffect(
                        lesson_id=le.id,
                        component=c,
                        effect="lowered",
                        feature=f,
                        before=value,
                        after=after,
                        why=f"lowered {f} on {c} from {value:.2f} to {after:.2f}: in {n} earlier incident(s) here it "
                        f"showed on an innocent leading suspect, on the cause in {told.get(f, 0)}",
                    )
                )
        return effects

    def prior(
        self,
        scores: Mapping[str, float],
        components: Iterable[str],
        *,
        taken_down: Mapping[str, str] | None = None,
    ) -> tuple[dict[str, float], list[LessonEffect]]:
        """Scores with each past cause's prior added: PRIOR_WEIGHT of the best score, times its share of
        the causes seen behind alerts here (the same alert, and recent causes, weigh more), times how much
        history there is (full from PRIOR_HISTORY incidents with a known cause on).

        ``taken_down`` (:func:`taken_down_by`): components a broken object of this incident (a node that
        is down, a quota) leaves without a ready pod, each with that object. Their prior is held: the
        outage is the object's doing, which their history as causes does not speak to (measured: a
        service's prior lifted it above the node that was down under it).

        Measured: weighing past causes by how alike their situation was (the leading suspects and their
        evidence, kept in each culprit lesson's trigger) did worse on the development sets than this."""
        culprits = [le for le in self.here(components) if le.teaches == "culprit" and le.component is not None]
        if not culprits:
            return dict(scores), []
        alert = alert_of(self.incident)
        recent = sorted(culprits, key=lambda le: (le.last_seen or le.created_at, le.id), reverse=True)
        weights: dict[str, float] = {}
        lesson_for: dict[str, Lesson] = {}
        for age, le in enumerate(recent):
            same = 1.0 if le.trigger.alert == alert else OTHER_ALERT
            if le.component is None:
                continue
            weights[le.component] = weights.get(le.component, 0.0) + same * le.count * 0.5 ** (age / PRIOR_HALF_LIFE)
            lesson_for.setdefault(le.component, le)
        total = sum(weights.values())
        seen = sum(le.count for le in culprits)
        best = max(scores.values(), default=0.0) or 1.0
        out = dict(scores)
        effects = []
        for c, w in sorted(weights.items()):
            bonus = round(PRIOR_WEIGHT * best * (w / total) * min(1.0, seen / PRIOR_HISTORY), 4)
            if bonus <= 0:
                continue
            before = out.get(c, 0.0)
            le = lesson_for[c]
            holder = (taken_down or {}).get(c)
            if holder is not None:
                effects.append(
                    LessonEffect(
                        lesson_id=le.id,
                        component=c,
                        effect="held",
                        before=round(before, 4),
                        after=round(before, 4),
                        why=f"did not raise {c} by {bonus:.2f}: {holder} is broken and leaves it without a ready "
                        f"pod, which its {le.count} earlier incident(s) as the cause do not explain",
                    )
                )
                continue
            out[c] = before + bonus
            effects.append(
                LessonEffect(
                    lesson_id=le.id,
                    component=c,
                    effect="raised",
                    before=round(before, 4),
                    after=round(before + bonus, 4),
                    why=f"raised {c} by {bonus:.2f}: it was the cause behind {le.trigger.alert} in {le.count} "
                    f"earlier incident(s) (last {le.seen_in[-1] if le.seen_in else le.source_incident})",
                )
            )
        return out, effects

    def reopen(
        self,
        results: Sequence[HypothesisResult],
        components: Iterable[str],
        *,
        releases: Mapping[str, Mapping[str, str]] | None = None,
    ) -> tuple[list[HypothesisResult], list[LessonEffect]]:
        """Results with each refutation the history overturned reopened: a hypothesis refuted only by
        checks that refuted the same kind on the same component in an earlier incident where it was the
        cause (an ``overturned`` lesson per check; one that names releases, only where one of them is out
        again: ``releases``, :func:`releases_of`) becomes inconclusive, its refuting evidence kept and its
        reason saying which lesson and which incidents. A refutation by any other check stands. The judge's
        rule is not changed; what a check's refutation is worth in this environment is.

        Measured: without the release, a release that was innocent (another build of the same service)
        had its refutation reopened too."""
        out_now = {c: set(r) for c, r in (releases or {}).items()}
        overturned: dict[tuple[str | None, str | None], Lesson] = {}
        for le in sorted(self.here(components), key=lambda le: le.id):
            named = {s[len(RELEASE) :] for s in le.trigger.signals if s.startswith(RELEASE)}
            if le.teaches == "overturned" and (not named or named & out_now.get(le.component or "", set())):
                overturned.setdefault((le.component, le.feature), le)
        if not overturned:
            return list(results), []
        out, effects = [], []
        for r in results:
            h = r.hypothesis
            checks = sorted({e.check or "" for e in r.verdict.refuting})
            lessons = [overturned.get((h.component, f"{h.kind}/{check}")) for check in checks]
            if r.verdict.status != "refuted" or not checks or any(le is None for le in lessons):
                out.append(r)
                continue
            held = [le for le in lessons if le is not None]
            seen = list(dict.fromkeys(i for le in held for i in [*le.seen_in, le.source_incident]))
            why = (
                f"reopened {h.kind} on {h.component}: {', '.join(checks)} refuted it, as it did in "
                f"{len(seen)} earlier incident(s) where {h.component} was the cause ({', '.join(seen[-3:])})"
            )
            verdict = r.verdict.model_copy(update={"status": "inconclusive", "reason": f"{why}; {r.verdict.reason}"})
            out.append(r.model_copy(update={"verdict": verdict}))
            effects += [
                LessonEffect(
                    lesson_id=le.id,
                    component=h.component,
                    effect="reopened",
                    feature=le.feature,
                    before=h.score,
                    after=h.score,
                    why=why,
                )
                for le in held
            ]
        return out, effects

    def uses(self, effects: Sequence[LessonEffect]) -> list[LessonUse]:
        """Each environment lesson that acted, with what it did, for the report."""
        by_id = {le.id: le for le in self.lessons}
        out = []
        for lesson_id in sorted({e.lesson_id for e in effects}):
            mine = [e for e in effects if e.lesson_id == lesson_id]
            le = by_id[lesson_id]
            out.append(
                LessonUse(
                    lesson_id=lesson_id,
                    relevance=1.0,
                    acted=any(e.effect != "held" for e in mine),
                    effects=[e.why for e in mine],
                    lowered=sorted({f"{e.component}/*" for e in mine if e.effect == "lowered"}),
                    # a reopened refutation lifts its component as a prior does, and is held to account alike
                    raised=sorted({e.component for e in mine if e.effect in ("raised", "reopened")}),
                    refuted_kind=None,
                    source_incident=le.source_incident,
                    refutation=list(le.refuting_evidence),
                )
            )
        return out
