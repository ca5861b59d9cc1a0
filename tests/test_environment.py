"""Environment lessons: what a system's past incidents taught (usual evidence, past causes), acting
on its next ones — bounded, shown, kept to their own environment, forgotten when old."""

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from opsagent import environment
from opsagent.environment import EnvironmentMemory, contradictions, forgotten, named_as_reopened, taught
from opsagent.feedback import apply_feedback, keep_investigation
from opsagent.kubestate import replicaset_of
from opsagent.lessons import InMemoryLessons, about_environment, finalised, merge, misled_by, problems, retrieve
from opsagent.models import (
    Action,
    ChangeRecord,
    ChangesData,
    Citation,
    Evidence,
    Hypothesis,
    HypothesisResult,
    Incident,
    KubeFinding,
    KubernetesData,
    Lesson,
    LessonTrigger,
    LessonUse,
    Observation,
    Situation,
    SourceKind,
    StopReason,
    Suspect,
    Symptom,
    Verdict,
    VersionsData,
)
from opsagent.pipeline import investigate_fixture
from opsagent.plan import load_default_playbooks
from opsagent.reasoner import PlaybookReasoner
from opsagent.scoreboard import replay
from opsagent.store import Store, StoreLocation
from opsagent.triage import ComponentProfile, Triage
from tests.conftest import ORDER_INCIDENT

NOW = datetime(2026, 3, 1, tzinfo=UTC)
SYSTEM = ["api", "cart", "db", "pay", "search"]
ALERT = {"alertname": "ApiSlow", "service": "api"}
REMEDY = Action(tool="logs.summary", args={"service": "db"})
PREVIOUS_RELEASE = Path(__file__).parent / "data" / "store-schema3.sql"


def incident(components: list[str] = SYSTEM) -> Incident:
    start = NOW - timedelta(minutes=30)
    return Incident.model_validate(
        {
            "id": "inc-next",
            "services": [components[0]],
            "symptom": "latency",
            "onset": NOW - timedelta(minutes=5),
            "window": {"start": start, "end": NOW},
            "baseline": {"start": start, "end": NOW - timedelta(minutes=10)},
            "labels": ALERT,
            "title": "api slow",
        }
    )


def situation(components: list[str] = SYSTEM) -> Situation:
    return Situation(
        alert="ApiSlow@api",
        symptom=Symptom.latency,
        components=components,
        evidence={"cart": {"log:new_errors": 4.0, "signal:latency_p99:up": 2.0}, "db": {"mech:own_errors": 3.0}},
        observations={
            "cart": {"log:new_errors": "l-1", "signal:latency_p99:up": "m-1"},
            "db": {"mech:own_errors": "l-2"},
        },
    )


def learned(times: int, components: list[str] = SYSTEM, cause: str = "db") -> list[Lesson]:
    """What ``times`` incidents alike taught, merged as a store merges them."""
    return _merged(situation(components), times, cause)


def _merged(seen: Situation, times: int, cause: str) -> list[Lesson]:
    """The lessons ``times`` incidents in situation ``seen`` (leading suspects cart, db, api) taught."""
    memory = InMemoryLessons()
    for n in range(times):
        for le in taught(
            seen,
            ["cart", "db", "api"],
            cause=cause,
            kind="code_exception",
            incident_id=f"inc-{n}",
            now=NOW + timedelta(minutes=n),
            remedy=REMEDY,
        ):
            memory.upsert_lesson(le)
    return memory.lessons()


def test_an_incident_teaches_its_cause_and_the_evidence_usual_on_the_innocent_suspects_above_it() -> None:
    lessons = learned(1)
    culprit = next(le for le in lessons if le.teaches == "culprit")
    assert culprit.component == "db" and culprit.trigger.alert == "ApiSlow@api"
    assert culprit.refuting_evidence[0].observation_id == "l-2"  # the evidence the true cause showed
    usual = {(le.component, le.feature): le.strength for le in lessons if le.teaches == "usual"}
    assert usual == {("cart", "log:new_errors"): 4.0, ("cart", "signal:latency_p99:up"): 2.0}
    assert all(not problems(le) for le in lessons)  # each is a concrete lesson: trigger, evidence, a tool call
    assert all(le.next_action == REMEDY for le in lessons)


def test_evidence_usual_on_a_component_is_discounted_by_at_most_half_and_the_report_says_why() -> None:
    memory = EnvironmentMemory.of(learned(3), incident())
    features = {"cart": {"log:new_errors": 6.0}, "db": {"mech:own_errors": 3.0}}
    effects = memory.calibrate(features, SYSTEM)
    assert features["cart"]["log:new_errors"] == 3.0  # 6 - min(4, 6/2): it never hides the evidence
    assert features["db"] == {"mech:own_errors": 3.0}
    (effect,) = effects
    assert effect.before == 6.0 and effect.after == 3.0
    assert "in 3 earlier incidents it showed up to 4.00 there" in effect.why
    (use,) = memory.uses(effects)
    assert use.acted and use.lowered == ["cart/*"] and effect.why in use.effects


def test_evidence_usual_on_a_component_under_two_alerts_is_discounted_once_by_at_most_half() -> None:
    # each alert keeps its own usual level (a lesson per alert); together they must not discount 6.0 to 1.5
    other = situation().model_copy(
        update={"alert": "ApiErrors@api", "evidence": {**situation().evidence, "cart": {"log:new_errors": 5.0}}}
    )
    lessons = learned(3) + _merged(other, 3, "db")
    usual = sorted(
        (le for le in lessons if le.teaches == "usual" and le.feature == "log:new_errors"), key=lambda le: le.id
    )
    assert len(usual) == 2 and {le.trigger.alert for le in usual} == {"ApiSlow@api", "ApiErrors@api"}
    memory = EnvironmentMemory.of(lessons, incident())
    features = {"cart": {"log:new_errors": 6.0}}
    effects = memory.calibrate(features, SYSTEM)
    assert features["cart"]["log:new_errors"] == 3.0
    lowered = [e for e in effects if e.effect == "lowered"]
    held = [e for e in effects if e.effect == "held"]
    assert len(lowered) == 1 and len(held) == 1
    speaker = next(le for le in usual if le.trigger.alert == "ApiErrors@api")  # the highest level speaks
    assert lowered[0].lesson_id == speaker.id and held[0].lesson_id != speaker.id
    assert f"lesson {speaker.id} sets its usual level" in held[0].why
    assert {u.lesson_id: u.acted for u in memory.uses(effects)} == {speaker.id: True, held[0].lesson_id: False}


def test_one_innocent_showing_is_not_yet_usual() -> None:
    features = {"cart": {"log:new_errors": 6.0}}
    assert EnvironmentMemory.of(learned(1), incident()).calibrate(features, SYSTEM) == []
    assert features["cart"]["log:new_errors"] == 6.0


def test_a_past_cause_gets_a_bounded_prior_shown_in_its_effect() -> None:
    memory = EnvironmentMemory.of(learned(3), incident())
    scores, effects = memory.prior({"cart": 2.0, "db": 0.0, "api": 0.5}, SYSTEM)
    assert 0 < scores["db"] <= environment.PRIOR_WEIGHT * 2.0  # never more than PRIOR_WEIGHT of the best
    assert scores["cart"] == 2.0 and scores["api"] == 0.5
    (effect,) = effects
    assert effect.effect == "raised" and "cause behind ApiSlow@api in 3 earlier incident(s)" in effect.why


def test_a_past_cause_a_broken_node_takes_down_keeps_no_prior_and_the_report_says_why() -> None:
    down = KubeFinding(
        component="node-a",
        component_type="node",
        object="Node/node-a",
        sign="node_not_ready",
        kind="unknown",
        why="node node-a: NotReady",
        field="status.conditions[Ready]",
        affects=["db", "node-a"],
    )
    read = Observation(
        id="k-1",
        action=Action(tool="kubernetes.nodes"),
        source=SourceKind.kubernetes,
        data=KubernetesData(service=None, findings=[down]),
        text="",
        tokens=1,
    )
    taken_down = environment.taken_down_by([read])
    assert taken_down == {"db": "node-a"}  # the node itself is not its own victim
    memory = EnvironmentMemory.of(learned(3), incident())
    scores, effects = memory.prior({"node-a": 1.0, "db": 0.8}, SYSTEM, taken_down=taken_down)
    assert scores == {"node-a": 1.0, "db": 0.8}  # without it db would be lifted above the node
    (effect,) = effects
    assert effect.effect == "held" and "node-a is broken and leaves it without a ready pod" in effect.why
    (use,) = memory.uses(effects)
    assert not use.acted and use.raised == []


def test_lessons_of_another_environment_or_about_a_component_gone_do_not_act() -> None:
    other = ["web", "queue", "worker", "cache", "db"]  # only db in common
    memory = EnvironmentMemory.of(learned(3, components=other), incident())
    features = {"db": {"mech:own_errors": 3.0}}
    assert memory.prior({"db": 1.0}, SYSTEM) == ({"db": 1.0}, [])
    gone = EnvironmentMemory.of(learned(3, cause="db"), incident([c for c in SYSTEM if c != "db"]))
    assert gone.prior({"cart": 1.0}, [c for c in SYSTEM if c != "db"]) == ({"cart": 1.0}, [])
    assert memory.calibrate(features, SYSTEM) == []


def test_a_lesson_that_misled_more_than_it_helped_stops_acting() -> None:
    lessons = [le.model_copy(update={"times_misled": 2, "times_helped": 1}) for le in learned(3)]
    memory = EnvironmentMemory.of(lessons, incident())
    assert memory.prior({"cart": 1.0}, SYSTEM) == ({"cart": 1.0}, [])


def test_contradicting_lessons_are_both_kept_and_the_usual_level_holds_off_saying_why() -> None:
    # cart's error burst was usual while innocent; later cart was the cause, with that burst leading
    lessons = learned(3) + learned(1, cause="cart")
    usual = next(le for le in lessons if le.teaches == "usual" and le.feature == "log:new_errors")
    cause = next(le for le in lessons if le.teaches == "culprit" and le.component == "cart")
    cause = cause.model_copy(update={"trigger": cause.trigger.model_copy(update={"signals": ["cart/log:new_errors"]})})
    lessons = [le for le in lessons if le.id != cause.id] + [cause]
    assert (usual.id, cause.id) in {(a.id, b.id) for a, b in contradictions(lessons)}
    features = {"cart": {"log:new_errors": 6.0}}
    effects = EnvironmentMemory.of(lessons, incident()).calibrate(features, SYSTEM)
    held = next(e for e in effects if e.lesson_id == usual.id)
    assert held.effect == "held" and cause.id in held.why and features["cart"]["log:new_errors"] == 6.0


def test_merging_keeps_the_strongest_usual_level_and_the_latest_sighting() -> None:
    a, b = (next(le for le in learned(1) if le.feature == "log:new_errors") for _ in range(2))
    later = b.model_copy(update={"strength": 9.0, "last_seen": NOW + timedelta(days=1), "source_incident": "inc-9"})
    merged = merge(a, later)
    assert merged.count == 2 and merged.strength == 9.0 and merged.last_seen == NOW + timedelta(days=1)
    assert finalised(merged).id == a.id  # an export re-imported keeps its id


def test_old_lessons_are_forgotten_and_each_alert_keeps_at_most_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    lessons = learned(1)
    later = NOW + environment.MAX_AGE + timedelta(days=1)
    assert set(forgotten(lessons, now=later)) == {le.id for le in lessons}
    monkeypatch.setattr(environment, "CAP_PER_ALERT", 1)
    kept = set(le.id for le in lessons) - set(forgotten(lessons, now=NOW))
    assert len(kept) == 1


def test_environment_lessons_stay_out_of_the_retrieval_of_refuted_kinds() -> None:
    found = Triage(
        graph=[],
        components=[
            ComponentProfile(component=c, own=1.0, score=1.0, reachable=True, features={"log:new_errors": 4.0})
            for c in SYSTEM
        ],
        observation_ids=[],
        source_kinds=[],
    )
    assert retrieve(learned(2), incident(), found) == []


def test_a_replay_with_truth_teaches_the_environment_and_the_next_report_shows_what_it_did() -> None:
    memory = InMemoryLessons()
    asyncio.run(replay(ORDER_INCIDENT, memory=memory, use_lessons=True, learn=True))
    culprits = [le for le in memory.lessons() if le.teaches == "culprit"]
    assert [le.component for le in culprits] == ["order-service"]
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, lessons=memory.lessons()))
    assert report.situation is not None and "order-service" in report.situation.components
    raised = [u for u in report.lessons_used if u.raised]
    assert raised and raised[0].raised == ["order-service"] and "earlier incident" in raised[0].effects[0]


def test_feedback_on_a_live_investigation_teaches_what_a_replay_with_truth_teaches(
    store_location: StoreLocation,
) -> None:
    report, truth = asyncio.run(investigate_fixture(ORDER_INCIDENT))
    assert truth is not None
    checks = PlaybookReasoner(load_default_playbooks()).first_checks()
    from_replay = about_environment(report, truth.target, truth.kind, NOW, first_checks=checks)
    with Store(store_location) as store:
        keep_investigation(store, report)
        with pytest.raises(ValueError, match="'no-such-service' is not a component"):
            apply_feedback(
                store,
                report.incident.id,
                correct=False,
                root_cause=f"no-such-service/{truth.kind}",
                first_checks=checks,
                now=NOW,
            )
        assert store.investigation(report.incident.id).feedback is None  # nothing was written
        done = apply_feedback(
            store,
            report.incident.id,
            correct=False,
            root_cause=f"{truth.target}/{truth.kind}",
            first_checks=checks,
            now=NOW,
        )
        assert done.taught == [le.id for le in from_replay]
        stored = {le.id: le for le in store.lessons()}
    assert all(stored[le.id].component == le.component for le in from_replay)


def test_lessons_from_an_older_store_read_as_before_and_touch_no_environment(tmp_path: Path) -> None:
    path = tmp_path / "opsagent.db"
    with sqlite3.connect(path) as db:
        db.executescript(PREVIOUS_RELEASE.read_text())
    with Store(StoreLocation.sqlite(path)) as store:
        old = store.lessons()
    assert len(old) == 2 and {le.teaches for le in old} == {"refuted"}
    assert EnvironmentMemory.of(old, incident()).lessons == []


# ---------------------------------------------------------------- detectors: everyday noise, telling evidence


def taught_by(evidence: dict[str, dict[str, float]], times: int, *, cause: str = "db") -> list[Lesson]:
    """What ``times`` incidents taught where the leading suspects (cart, db, api) showed ``evidence``."""
    seen = Situation(
        alert="ApiSlow@api",
        symptom=Symptom.latency,
        components=SYSTEM,
        evidence=evidence,
        observations={c: {f: f"o-{c}-{f}" for f in fs} for c, fs in evidence.items()},
    )
    return _merged(seen, times, cause)


def test_an_incident_teaches_which_detectors_the_cause_showed_and_which_its_innocent_leading_suspects_showed() -> None:
    lessons = learned(1)
    telling = {le.feature: le.strength for le in lessons if le.teaches == "telling"}
    noise = {le.feature: le.strength for le in lessons if le.teaches == "noise"}
    assert telling == {"mech:own_errors": 3.0}
    assert noise == {"log:new_errors": 4.0, "signal:latency_p99:up": 2.0}
    detectors = [le for le in lessons if le.teaches in ("noise", "telling")]
    assert all(le.component is None and le.trigger.alert == "ApiSlow@api" for le in detectors)
    cited = {le.feature: le.refuting_evidence[0].observation_id for le in lessons if le.teaches == "noise"}
    assert cited == {"log:new_errors": "l-1", "signal:latency_p99:up": "m-1"}  # the observation that showed it
    assert all(not problems(le) for le in lessons)


def test_a_detector_seen_on_innocent_leading_suspects_counts_at_most_half_less_on_every_component() -> None:
    memory = EnvironmentMemory.of(learned(environment.NOISE_MIN_SEEN), incident())
    features = {"pay": {"signal:latency_p99:up": 4.0}, "search": {"signal:latency_p99:up": 2.0}, "db": {"x": 1.0}}
    effects = memory.calibrate(features, SYSTEM)
    assert features == {
        "pay": {"signal:latency_p99:up": 2.0},
        "search": {"signal:latency_p99:up": 1.0},
        "db": {"x": 1.0},
    }
    assert {(e.component, e.before, e.after) for e in effects} == {("pay", 4.0, 2.0), ("search", 2.0, 1.0)}
    assert "in 3 earlier incident(s) here it showed on an innocent leading suspect, on the cause in 0" in effects[0].why
    (use,) = memory.uses(effects)
    assert use.acted and use.lowered == ["pay/*", "search/*"]


def test_a_detector_is_not_noise_before_it_showed_on_innocents_in_enough_incidents() -> None:
    features = {"pay": {"signal:latency_p99:up": 4.0}}
    memory = EnvironmentMemory.of(learned(environment.NOISE_MIN_SEEN - 1), incident())
    assert memory.calibrate(features, SYSTEM) == [] and features["pay"]["signal:latency_p99:up"] == 4.0


def test_a_detector_the_cause_showed_too_counts_less_only_by_how_much_more_often_innocents_showed_it() -> None:
    # latency moved on cart (innocent) in three incidents, and on db, the cause, in one of them
    lessons = taught_by({"cart": {"lat": 2.0}}, 2) + taught_by({"cart": {"lat": 2.0}, "db": {"lat": 1.0}}, 1)
    memory = EnvironmentMemory.of(lessons, incident())
    features = {"pay": {"lat": 3.0}}
    memory.calibrate(features, SYSTEM)
    assert features["pay"]["lat"] == pytest.approx(3.0 * (1 - environment.MAX_DISCOUNT * 2 / 3), abs=1e-4)
    # as often on the cause as on the innocents: it tells nothing apart, and nothing is lowered
    both = taught_by({"cart": {"lat": 2.0}, "db": {"lat": 1.0}}, 3)
    assert EnvironmentMemory.of(both, incident()).calibrate({"pay": {"lat": 3.0}}, SYSTEM) == []


def test_noise_that_lowered_the_cause_is_held_to_account_and_of_another_system_does_nothing() -> None:
    lessons = learned(environment.NOISE_MIN_SEEN)
    memory = EnvironmentMemory.of(lessons, incident())
    effects = memory.calibrate({"pay": {"signal:latency_p99:up": 4.0}}, SYSTEM)
    assert misled_by(memory.uses(effects), "pay", "code_exception", top="cart") == [effects[0].lesson_id]
    other = ["web", "queue", "worker", "cache", "pay"]
    assert (
        EnvironmentMemory.of(lessons, incident(other)).calibrate({"pay": {"signal:latency_p99:up": 4.0}}, other) == []
    )


def test_a_usual_level_on_a_component_wins_over_the_environment_wide_noise_of_the_same_detector() -> None:
    memory = EnvironmentMemory.of(learned(environment.NOISE_MIN_SEEN), incident())
    features = {"cart": {"signal:latency_p99:up": 8.0}}
    effects = memory.calibrate(features, SYSTEM)
    assert features["cart"]["signal:latency_p99:up"] == 6.0  # 8 - 2 (cart's usual level), not halved again
    (effect,) = effects
    assert effect.why.startswith("lowered signal:latency_p99:up on cart from 8.00 to 6.00: in 3 earlier incidents")


def test_a_detector_lesson_without_its_feature_is_refused_and_a_whole_one_survives_the_store(
    store_location: StoreLocation,
) -> None:
    noise = next(le for le in learned(1) if le.teaches == "noise")
    assert "a noise lesson needs the feature and the strength (>= 0) it showed" in problems(
        noise.model_copy(update={"feature": None})
    )
    with Store(store_location) as store:
        store.upsert_lesson(noise)
        assert store.lessons() == [noise]


# ---------------------------------------------------------------- releases

CART_OLD, CART_NEW = "cart-7d9f8c6b5", "cart-5c4b8f7d9a"


def rolled_out(cart_pods: list[str], *, old_pods: tuple[str, ...] = (), summary: str = "") -> list[Observation]:
    """A changes read with cart's rollout, and the canary comparison of cart's versions."""
    change = ChangeRecord(
        id="rollout-cart",
        ts=NOW - timedelta(minutes=8),
        service="cart",
        kind="rollout",
        summary=summary or "rollout cart v1->v2",
        to_version="v2",
        minutes_before_onset=3.0,
    )
    return [
        Observation(
            id="c-1",
            action=Action(tool="changes.list"),
            source=SourceKind.changes,
            data=ChangesData(changes=[change]),
            text="",
            tokens=1,
        ),
        Observation(
            id="v-1",
            action=Action(tool="metrics.versions", args={"service": "cart"}),
            source=SourceKind.versions,
            data=VersionsData(service="cart", new_pods=cart_pods, old_pods=list(old_pods), new_version="v2"),
            text="",
            tokens=1,
        ),
    ]


def released(times: int, cause: str = "db", release: str = CART_NEW) -> list[Lesson]:
    """What ``times`` incidents taught in which cart's release ``release`` was out."""
    seen = situation().model_copy(update={"releases": {"cart": {release: "v-1"}}})
    return _merged(seen, times, cause)


def test_a_release_is_one_build_named_by_its_pods_and_not_the_old_version() -> None:
    assert replicaset_of(f"{CART_NEW}-x2x9q") == CART_NEW
    assert replicaset_of("redis-0") is None and replicaset_of("cart") is None  # no build in the name
    found = environment.releases_of(
        rolled_out([f"{CART_NEW}-x2x9q", f"{CART_NEW}-p4k2m"], old_pods=(f"{CART_OLD}-a1b2c",))
    )
    assert found == {"cart": {CART_NEW: "v-1"}}
    # a version no metric has seen yet is known by the pods its rollout names; the old ones it removes are not it
    unseen = rolled_out(
        [], old_pods=(f"{CART_OLD}-a1b2c",), summary=f"step 1: +1 pod {CART_NEW}-x2x9q (-1 {CART_OLD}-a1b2c)"
    )
    assert environment.releases_of(unseen) == {"cart": {CART_NEW: "c-1"}}
    assert environment.releases_of(rolled_out(["cart-v2"], summary="rollout cart v1->v2")) == {}  # a name is no build


def test_a_release_out_while_the_cause_was_elsewhere_halves_its_change_evidence_once_and_says_why() -> None:
    lessons = released(1)
    (vetted,) = [le for le in lessons if (le.feature or "").startswith(environment.RELEASE)]
    assert vetted.component == "cart" and vetted.refuting_evidence[0].observation_id == "v-1" and not problems(vetted)
    features = {"cart": {"change:deploy": 0.5, "version:unseen": 3.0, "signal:latency_p99:up": 2.0}}
    memory = EnvironmentMemory.of(lessons, incident())
    effects = memory.calibrate(features, SYSTEM, releases={"cart": {CART_NEW: "v-9"}})
    assert features["cart"] == {"change:deploy": 0.25, "version:unseen": 1.5, "signal:latency_p99:up": 2.0}
    assert all(f"its release {CART_NEW} was out in 1 earlier incident(s)" in e.why for e in effects)
    assert {e.feature for e in effects} == {"change:deploy", "version:unseen"}
    # another build of cart is new here: nothing vouches for it
    other = {"cart": {"change:deploy": 0.5}}
    assert memory.calibrate(other, SYSTEM, releases={"cart": {"cart-9f8e7d6c5b": "v-9"}}) == []
    assert other["cart"]["change:deploy"] == 0.5


def test_a_release_that_was_the_cause_behind_the_alert_is_not_vouched_for_and_the_report_says_why() -> None:
    lessons = released(2) + released(1, cause="cart")  # out twice while db was the cause, then it was the cause
    features = {"cart": {"change:deploy": 0.5}}
    effects = EnvironmentMemory.of(lessons, incident()).calibrate(features, SYSTEM, releases={"cart": {CART_NEW: "c"}})
    assert features["cart"]["change:deploy"] == 0.5
    (held,) = [e for e in effects if e.feature == "change:deploy"]
    assert held.effect == "held" and f"release {CART_NEW} was the cause behind ApiSlow@api" in held.why


# ---------------------------------------------------------------- refutations the truth overturned


def verified(component: str, kind: str, status: str, checks: tuple[str, ...]) -> HypothesisResult:
    """A verified hypothesis about ``kind`` on ``component``, refuted (or not) by ``checks``."""
    hypothesis = Hypothesis(
        id=f"{kind}@{component}",
        component=component,
        kind=kind,
        statement=f"{kind} on {component}",
        confirm_if=[],
        refute_if=[],
        prior=0.5,
        score=0.2,
    )
    refuting = [
        Evidence(
            observation_id=f"m-{check}",
            source=SourceKind.metrics,
            stance="refutes",
            statement="v2 no worse",
            check=check,
        )
        for check in checks
    ]
    verdict = Verdict(status=status, reason="v2 against v1: no figure of v2 worse", refuting=refuting)
    return HypothesisResult(hypothesis=hypothesis, steps=[], verdict=verdict, stop_reason=StopReason.refuted)


def overturned_by(
    times: int, *, check: str = "new_version", cause: str = "db", releases: dict[str, str] | None = None
) -> list[Lesson]:
    """What ``times`` incidents taught where ``check`` refuted a bad release of ``cause`` (``releases``: its
    ReplicaSets, with the observation naming each), which was the cause."""
    memory = InMemoryLessons()
    for n in range(times):
        for le in taught(
            situation().model_copy(update={"releases": {cause: releases or {}}}),
            ["cart", "db", "api"],
            cause=cause,
            kind="deploy_regression",
            incident_id=f"inc-{n}",
            now=NOW + timedelta(minutes=n),
            remedy=REMEDY,
            overturned={check: f"m-{check}-{n}"},
        ):
            memory.upsert_lesson(le)
    return memory.lessons()


def test_a_replay_whose_cause_a_check_had_refuted_teaches_that_the_refutation_was_overturned() -> None:
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT))
    assert report.situation is not None
    refuted = verified("db", "deploy_regression", "refuted", ("new_version",))
    report = report.model_copy(update={"results": [*report.results, refuted]})
    checks = PlaybookReasoner(load_default_playbooks()).first_checks()
    lessons = about_environment(report, "db", "deploy_regression", NOW, first_checks=checks)
    (lesson,) = [le for le in lessons if le.teaches == "overturned"]
    assert (lesson.component, lesson.feature) == ("db", "deploy_regression/new_version")
    assert lesson.refuting_evidence[0].observation_id == "m-new_version"  # the refutation it overturns, cited
    assert not problems(lesson)
    # the cause's kind not refuted, or another kind refuted on it: nothing to overturn
    right = verified("db", "deploy_regression", "inconclusive", ())
    report = report.model_copy(update={"results": [right, verified("db", "memory_leak", "refuted", ("memory",))]})
    assert not [
        le
        for le in about_environment(report, "db", "deploy_regression", NOW, first_checks=checks)
        if le.teaches == "overturned"
    ]


def test_a_refutation_overturned_before_is_reopened_keeping_its_evidence_and_saying_why() -> None:
    memory = EnvironmentMemory.of(overturned_by(2), incident())
    again = verified("db", "deploy_regression", "refuted", ("new_version",))
    (result,), effects = memory.reopen([again], SYSTEM)
    assert result.verdict.status == "inconclusive"
    assert result.verdict.refuting == again.verdict.refuting  # the refuting evidence stays in the verdict
    assert "new_version refuted it, as it did in 2 earlier incident(s) where db was the cause" in result.verdict.reason
    (effect,) = effects
    assert effect.effect == "reopened" and effect.component == "db" and effect.why in result.verdict.reason
    (use,) = memory.uses(effects)
    assert use.acted and use.raised == ["db"]  # held to account like a prior: misled where db leads and is innocent
    assert misled_by([use], "cart", "code_exception", top="db") == [use.lesson_id]


def test_a_refutation_by_another_check_on_another_kind_or_component_stands() -> None:
    memory = EnvironmentMemory.of(overturned_by(2), incident())
    standing = [
        verified("db", "deploy_regression", "refuted", ("new_version", "errors")),  # a second check refuted it too
        verified("db", "memory_leak", "refuted", ("new_version",)),
        verified("cart", "deploy_regression", "refuted", ("new_version",)),
    ]
    assert memory.reopen(standing, SYSTEM) == (standing, [])


def test_an_overturned_lesson_that_misled_more_than_it_helped_or_of_another_system_does_not_reopen() -> None:
    again = [verified("db", "deploy_regression", "refuted", ("new_version",))]
    unreliable = [le.model_copy(update={"times_misled": 2, "times_helped": 1}) for le in overturned_by(2)]
    assert EnvironmentMemory.of(unreliable, incident()).reopen(again, SYSTEM) == (again, [])
    other = ["web", "queue", "worker", "cache", "db"]
    assert EnvironmentMemory.of(overturned_by(2), incident(other)).reopen(again, other) == (again, [])


def test_an_overturned_lesson_without_kind_and_check_is_refused_and_a_whole_one_survives_the_store(
    store_location: StoreLocation,
) -> None:
    lesson = next(le for le in overturned_by(1) if le.teaches == "overturned")
    assert "an overturned lesson needs the kind and the check whose refutation was overturned (kind/check)" in problems(
        lesson.model_copy(update={"feature": "new_version"})
    )
    with Store(store_location) as store:
        store.upsert_lesson(lesson)
        assert store.lessons() == [lesson]


def test_a_suspect_whose_refutation_was_reopened_names_that_kind_in_its_place_unless_proven() -> None:
    memory = EnvironmentMemory.of(overturned_by(1), incident())
    _, effects = memory.reopen([verified("db", "deploy_regression", "refuted", ("new_version",))], SYSTEM)
    suspects = [
        Suspect(component="db", kind="downstream_latency", score=0.8, status="inconclusive", why="budget exhausted"),
        Suspect(component="cart", kind="code_exception", score=0.6, status="inconclusive", why="no checks left"),
    ]
    named = named_as_reopened(suspects, effects)
    assert [(s.component, s.kind, s.score) for s in named] == [
        ("db", "deploy_regression", 0.8),  # the same place and score: it names a kind, it moves nothing
        ("cart", "code_exception", 0.6),
    ]
    assert named[0].why.startswith("reopened deploy_regression on db") and effects[0].lesson_id in named[0].why
    proven = [suspects[0].model_copy(update={"status": "confirmed"})]
    assert named_as_reopened(proven, effects) == proven  # what this incident proved stands


def test_an_overturned_refutation_of_a_release_is_reopened_only_where_that_release_is_out_again() -> None:
    lessons = overturned_by(1, releases={"db-5c4b8f7d9a": "c-1"})
    (lesson,) = [le for le in lessons if le.teaches == "overturned"]
    assert "release:db-5c4b8f7d9a" in lesson.trigger.signals and "release db-5c4b8f7d9a" in lesson.trigger.condition
    memory = EnvironmentMemory.of(lessons, incident())
    again = [verified("db", "deploy_regression", "refuted", ("new_version",))]
    (reopened,), _ = memory.reopen(again, SYSTEM, releases={"db": {"db-5c4b8f7d9a": "c-2"}})
    assert reopened.verdict.status == "inconclusive"
    # another build of the same service, or none: the refutation stands
    assert memory.reopen(again, SYSTEM, releases={"db": {"db-7d9f8c6b5": "c-2"}}) == (again, [])
    assert memory.reopen(again, SYSTEM) == (again, [])


def test_an_investigation_reopens_an_overturned_refutation_shows_it_and_keeps_what_it_proved() -> None:
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT))
    refuted = next(r for r in report.results if r.verdict.status == "refuted")
    component, kind = refuted.hypothesis.component, refuted.hypothesis.kind
    checks = PlaybookReasoner(load_default_playbooks()).first_checks()
    # a team's verdict: that refuted kind was the cause after all
    lessons = about_environment(report, component, kind, NOW, first_checks=checks)
    again, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, lessons=lessons))
    reopened = next(r for r in again.results if r.hypothesis.id == refuted.hypothesis.id)
    assert reopened.verdict.status == "inconclusive" and reopened.verdict.refuting == refuted.verdict.refuting
    (use,) = [u for u in again.lessons_used if any(e.startswith("reopened") for e in u.effects)]
    assert use.acted and use.raised == [component]
    assert again.suspects[0] == report.suspects[0]  # what this incident proved stands, in its place and kind


def test_feedback_that_a_conclusion_was_right_credits_only_the_lessons_that_acted_as_a_replay_does(
    store_location: StoreLocation,
) -> None:
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT))
    checks = PlaybookReasoner(load_default_playbooks()).first_checks()
    acting, held = (
        finalised(
            Lesson(
                trigger=LessonTrigger(symptom=report.incident.symptom, condition=f"{s} on api", signals=[s]),
                refuting_evidence=[Citation(observation_id="m-1", value="v2 no worse")],
                next_action=Action(tool="logs.summary", args={"service": "{service}"}),
                refuted_kind="deploy_regression",
                services=["api"],
                source_incident="inc-0",
                created_at=NOW,
                releases=["api-7d9f8c6b5"],
            )
        )
        for s in ("change:deploy", "log:new_error")
    )
    uses = [
        LessonUse(lesson_id=acting.id, relevance=1.0, acted=True, effects=["lowered deploy_regression on api x0.5"]),
        LessonUse(lesson_id=held.id, relevance=1.0, acted=False, effects=["did not lower deploy_regression on api"]),
    ]
    with Store(store_location) as store:
        for le in (acting, held):
            store.upsert_lesson(le)
        keep_investigation(store, report.model_copy(update={"lessons_used": uses}))
        apply_feedback(store, report.incident.id, correct=True, root_cause=None, first_checks=checks, now=NOW)
        helped = {le.id: le.times_helped for le in store.lessons()}
    assert (helped[acting.id], helped[held.id]) == (1, 0)
