"""Lessons: concrete or rejected, stored safely, retrieved by relevance, acting on the next run."""

import asyncio
import hashlib
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from opsagent.lessons import (
    InMemoryLessons,
    Retrieved,
    concrete,
    finalised,
    from_refutation,
    from_truth,
    problems,
    retrieve,
)
from opsagent.models import (
    Action,
    Citation,
    Evidence,
    Hypothesis,
    HypothesisResult,
    Incident,
    Lesson,
    LessonTrigger,
    LessonUse,
    Observation,
    SourceKind,
    StopReason,
    Symptom,
    Verdict,
    VersionsData,
)
from opsagent.pipeline import investigate_fixture, lesson_uses
from opsagent.plan import load_default_playbooks
from opsagent.reasoner import PlaybookReasoner
from opsagent.scoreboard import replay
from opsagent.store import Store, StoreError, StoreLocation, schema_version
from opsagent.strategies.base import Outcome
from opsagent.triage import Triage
from tests.conftest import ORDER_INCIDENT

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def lesson(kind: str = "db_pool_exhaustion", signals: tuple[str, ...] = ("log:timeout",), **kw: object) -> Lesson:
    base: dict[str, object] = dict(
        trigger=LessonTrigger(symptom=Symptom.latency, condition="timeouts in the logs", signals=list(signals)),
        refuting_evidence=[Citation(observation_id="m-123456", value="db_connections_used 30/200")],
        next_action=Action(tool="changes.list", args={"service": "{service}", "before_min": 30}),
        refuted_kind=kind,
        services=["order-service"],
        source_incident="inc-1",
        created_at=NOW,
    )
    base.update(kw)
    return finalised(Lesson.model_validate(base))


def test_a_lesson_without_refuting_evidence_is_rejected() -> None:
    with pytest.raises(ValidationError):
        lesson(refuting_evidence=[])


def test_a_lesson_without_a_concrete_tool_call_is_rejected() -> None:
    vague = lesson(next_action=Action(tool="think.harder", args={}))
    assert problems(vague) and "not a tool" in problems(vague)[0]
    bad_args = lesson(next_action=Action(tool="metrics.signal", args={"service": "{service}"}))
    assert problems(bad_args) and "metrics.signal(signal, service)" in problems(bad_args)[0]
    assert problems(lesson()) == []


def test_next_actions_are_templates_that_carry_over_to_other_services() -> None:
    action = concrete(lesson().next_action, "payment-service")
    assert action.args == {"service": "payment-service", "before_min": 30}


def test_store_migrates_merges_near_duplicates_and_counts_use(store_location: StoreLocation) -> None:
    with Store(store_location) as store:
        first, merged = store.upsert_lesson(lesson(source_incident="inc-1"))
        again, merged_again = store.upsert_lesson(lesson(source_incident="inc-2", services=["payment-service"]))
        other, _ = store.upsert_lesson(lesson(kind="slow_query"))
        store.count_use([first.id], counter="helped")
        stored = store.lesson(first.id)
    assert not merged and merged_again and first.id == again.id != other.id
    assert stored.count == 2 and stored.seen_in == ["inc-1", "inc-2"] and stored.times_helped == 1
    assert stored.services == ["order-service", "payment-service"]
    with Store(store_location) as reopened:  # a second process sees the same lessons
        assert reopened.schema_version() == schema_version()
        assert {le.id for le in reopened.lessons()} == {first.id, other.id}


def test_a_corrupt_store_is_a_clear_error_and_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "opsagent.db"
    path.write_bytes(b"this is not sqlite" * 100)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(StoreError) as exc:
        Store(path)
    assert "not a readable opsagent store" in str(exc.value) and str(path) in str(exc.value)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_locked_store_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "opsagent.db"
    Store(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError) as exc:
            Store(path, timeout_s=0.2).upsert_lesson(lesson())
        assert "locked" in str(exc.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with Store(path) as store:  # nothing was lost or half-written
        assert store.lessons() == []


def test_retrieval_ranks_by_trigger_overlap_and_caps_with_recent_ones() -> None:
    from opsagent.triage import ComponentProfile, Triage
    from tests.fakes import incident

    profile = ComponentProfile(
        component="checkout",
        own=3.0,
        score=3.0,
        reachable=True,
        features={"log:timeout": 1.0, "trace:self_time_up": 2.0},
    )
    found = Triage(graph=[], components=[profile], observation_ids=[], source_kinds=[])
    matching = lesson(signals=("log:timeout", "trace:self_time_up"))
    partial = lesson(kind="slow_query", signals=("log:timeout", "signal:db_query_latency_p99:up"))
    unrelated = lesson(
        kind="disk_full", signals=("near_limit:disk_usage",), created_at=datetime(2025, 1, 1, tzinfo=UTC)
    )
    old = [
        lesson(kind="gc_pause", signals=(f"signal:x{i}:up",), created_at=datetime(2024, 1, i + 1, tzinfo=UTC))
        for i in range(6)
    ]
    got = retrieve([unrelated, partial, matching, *old], incident("checkout"), found, top_k=3, cap=5)
    assert [r.lesson.id for r in got[:2]] == [matching.id, partial.id]
    assert got[0].applies and got[0].component == "checkout"  # every trigger signal shows there
    assert not got[1].applies  # half its trigger is missing: retrieved, but it does not act
    assert len(got) == 5 and unrelated.id in {r.lesson.id for r in got}  # the most recent fill the cap


def test_replay_learns_from_truth_what_would_have_found_it() -> None:
    report, truth = asyncio.run(investigate_fixture(ORDER_INCIDENT))
    assert truth is not None
    checks = PlaybookReasoner(load_default_playbooks()).first_checks()
    taught = from_truth(report, truth, NOW, first_checks=checks)
    db = next(le for le in taught if le.refuted_kind == "db_pool_exhaustion")
    assert db.next_action.tool == "changes.list" and db.next_action.args["service"] == "{service}"
    assert "log:timeout" in db.trigger.signals
    assert "/200" in db.refuting_evidence[0].value


def test_repeat_incident_needs_fewer_steps_and_starts_with_the_lessons_action() -> None:
    memory = InMemoryLessons()
    first = asyncio.run(replay(ORDER_INCIDENT, memory=memory, use_lessons=True, learn=True)).scores[0]
    assert memory.lessons(), "the first run taught nothing"
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, lessons=memory.lessons()))
    second = asyncio.run(replay(ORDER_INCIDENT, memory=memory, use_lessons=True)).scores[0]
    assert second.verdict_ok and first.verdict_ok
    assert second.steps < first.steps and second.tool_calls < first.tool_calls
    taught = next(le for le in memory.lessons() if le.teaches == "refuted")  # the others act on triage
    first_action = report.results[0].steps[0].action
    assert first_action is not None
    assert first_action == concrete(taught.next_action, "order-service")
    used = next(u for u in report.lessons_used if u.lesson_id == taught.id)
    assert used.acted and any("was not verified" in e for e in used.effects)
    assert next(le for le in memory.lessons() if le.id == taught.id).times_helped >= 1


def test_lessons_that_agree_stop_lowering_a_kind_once_they_misled_more_than_they_helped_between_them() -> None:
    incident = Incident.model_validate(
        {
            "id": "inc-2",
            "services": ["order-service"],
            "symptom": "latency",
            "onset": NOW + timedelta(minutes=20),
            "window": {"start": NOW, "end": NOW + timedelta(minutes=30)},
            "baseline": {"start": NOW, "end": NOW + timedelta(minutes=10)},
            "labels": {},
            "title": "slow",
        }
    )
    h = Hypothesis(
        id="h1",
        component="order-service",
        kind="db_pool_exhaustion",
        statement="the pool is exhausted",
        confirm_if=[],
        refute_if=[],
        prior=0.5,
        score=1.0,
    )
    triage = Triage(graph=[], components=[], observation_ids=[], source_kinds=[])
    reasoner = PlaybookReasoner(load_default_playbooks())
    # each alone has not misled more than it helped; together they misled twice and helped once
    misled = lesson(signals=("log:timeout",), times_misled=1, times_helped=1)
    fresh = lesson(signals=("log:timeout", "signal:latency_p99:up"), times_misled=1)
    agreeing = [Retrieved(lesson=le, relevance=1.0, component="order-service") for le in (misled, fresh)]
    (held,) = reasoner.rank(incident, [h], triage, agreeing)
    assert held.score == 1.0
    assert any(
        "2 lessons that lower it here misled 2 time(s) between them and helped 1" in n for n in held.lesson_notes
    )
    # with a record in their favour, one lowering still applies
    helped = [Retrieved(lesson=misled, relevance=1.0, component="order-service")]
    (lowered,) = reasoner.rank(incident, [h], triage, helped)
    assert lowered.score < 1.0


# ---------------------------------------------------------------- a refuted release is one build


#: Two builds of cart's pod template (ReplicaSets), and the one it replaced.
CART_BUILD = "cart-7d9f8c6b5"
CART_NEXT_BUILD = "cart-66c8f9d7b4"
CART_OLD_BUILD = "cart-5c4b3a2f1"


def later_incident() -> Incident:
    return Incident.model_validate(
        {
            "id": "inc-2",
            "services": ["api"],
            "symptom": "errors",
            "onset": NOW + timedelta(minutes=20),
            "window": {"start": NOW, "end": NOW + timedelta(minutes=30)},
            "baseline": {"start": NOW, "end": NOW + timedelta(minutes=10)},
            "labels": {},
            "title": "api errors",
        }
    )


def cart_hypothesis(kind: str) -> Hypothesis:
    return Hypothesis(
        id=f"{kind}@cart",
        component="cart",
        kind=kind,
        statement=f"{kind} on cart",
        confirm_if=[],
        refute_if=[],
        prior=0.5,
        score=1.0,
    )


def refuted_on_cart(kind: str, new_build: str) -> Lesson:
    """What an incident teaches where the canary comparison refuted ``kind`` on cart while ``new_build`` was out."""
    versions = Observation(
        id="v-1",
        action=Action(tool="metrics.versions", args={"service": "cart"}),
        source=SourceKind.versions,
        data=VersionsData(
            service="cart", new_pods=[f"{new_build}-x2x9q"], old_pods=[f"{CART_OLD_BUILD}-abcde"], new_version="v2"
        ),
        text="",
        tokens=1,
    )
    refuting = Evidence(
        observation_id="v-1", source=SourceKind.versions, stance="refutes", statement="v2 no worse", check="new_version"
    )
    result = HypothesisResult(
        hypothesis=cart_hypothesis(kind),
        steps=[],
        verdict=Verdict(status="refuted", reason="v2 no worse than v1", refuting=[refuting]),
        stop_reason=StopReason.refuted,
    )
    taught = from_refutation(
        later_incident(),
        result,
        NOW,
        {"v-1": versions},
        next_action=Action(tool="metrics.versions", args={"service": "cart"}),
    )
    assert taught is not None
    return taught


def ranked_with(taught: Lesson, kind: str, out_now: dict[str, list[str]]) -> Hypothesis:
    triage = Triage(graph=[], components=[], observation_ids=[], source_kinds=[], releases=out_now)
    reasoner = PlaybookReasoner(load_default_playbooks())
    (h,) = reasoner.rank(
        later_incident(), [cart_hypothesis(kind)], triage, [Retrieved(lesson=taught, relevance=1.0, component="cart")]
    )
    return h


def test_a_refuted_release_lowers_its_kind_only_where_the_same_build_is_out_again() -> None:
    taught = refuted_on_cart("deploy_regression", CART_BUILD)
    assert taught.releases == [CART_BUILD]  # the new build, never the old one
    assert ranked_with(taught, "deploy_regression", {"cart": [CART_BUILD]}).score < 1.0
    # another build of the same service: the refutation of the first says nothing of it
    other = ranked_with(taught, "deploy_regression", {"cart": [CART_NEXT_BUILD]})
    assert other.score == 1.0
    assert any(
        f"did not lower deploy_regression on cart: it refuted it in release {CART_BUILD} of cart, and cart has "
        f"{CART_NEXT_BUILD} out now" in n
        for n in other.lesson_notes
    )
    assert ranked_with(taught, "deploy_regression", {}).score == 1.0  # nothing rolled out now
    # two builds refuted are two lessons, not one merged across releases
    assert refuted_on_cart("deploy_regression", CART_NEXT_BUILD).id != taught.id


def test_a_refuted_kind_that_is_not_a_change_still_lowers_whatever_is_rolled_out() -> None:
    taught = refuted_on_cart("cpu_saturation", CART_BUILD)
    assert taught.releases is None
    assert ranked_with(taught, "cpu_saturation", {"cart": [CART_NEXT_BUILD]}).score < 1.0


def test_a_change_kind_refuted_before_lessons_named_releases_lowers_nothing_and_says_why() -> None:
    legacy = lesson(kind="deploy_regression")  # as an older store or export holds it: no releases
    assert legacy.releases is None
    h = ranked_with(legacy, "deploy_regression", {"cart": [CART_BUILD]})
    assert h.score == 1.0
    assert any("before lessons named the release they refuted" in n for n in h.lesson_notes)


def test_a_lesson_naming_its_release_keeps_it_and_its_id_through_export_and_import() -> None:
    taught = refuted_on_cart("deploy_regression", CART_BUILD)
    exported = yaml.safe_load(yaml.safe_dump([taught.model_dump(mode="json")]))
    (back,) = [finalised(Lesson.model_validate(e)) for e in exported]
    assert back == taught
    # an export from before lessons named releases imports as one (no key), with the id it had
    old = {k: v for k, v in lesson(kind="deploy_regression").model_dump(mode="json").items() if k != "releases"}
    assert finalised(Lesson.model_validate(old)).id == old["id"]


def test_a_lesson_held_back_by_its_release_did_not_act_and_earns_no_credit() -> None:
    taught = refuted_on_cart("deploy_regression", CART_BUILD)
    retrieved = [Retrieved(lesson=taught, relevance=1.0, component="cart")]

    def use_with(out_now: dict[str, list[str]]) -> LessonUse:
        triage = Triage(graph=[], components=[], observation_ids=[], source_kinds=[], releases=out_now)
        proposed = [ranked_with(taught, "deploy_regression", out_now)]
        (use,) = lesson_uses(Outcome(triage=triage, results=[], proposed=proposed, retrieved=retrieved))
        return use

    held = use_with({"cart": [CART_NEXT_BUILD]})
    assert not held.acted and not held.lowered  # so a right conclusion does not count it as helped
    assert any(e.startswith("did not lower") for e in held.effects)  # the report still says why
    assert use_with({"cart": [CART_BUILD]}).acted
