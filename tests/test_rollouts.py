"""Rollouts as changes: the format (steps, pods of each version, malformed records), steps recorded as
changes of their own folded into their rollout, and how concurrent changes are ranked."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from opsagent import ranking
from opsagent.analysis.changes import change_records, rank_changes
from opsagent.fixtures import Change, load, validate
from opsagent.models import (
    ChangeRecord,
    ChangesData,
    Incident,
    Observation,
    SourceKind,
    Symptom,
    TimeRange,
    VersionsData,
)
from opsagent.playbooks import Context, Expectation, evaluate
from tests.test_fixtures import HEADER

T0 = datetime(2026, 3, 1, 14, 0, tzinfo=UTC)
ONSET = T0 + timedelta(minutes=30)


def _at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def _incident() -> Incident:
    return Incident(
        id="inc-rollouts",
        title="t",
        services=("frontend",),
        symptom=Symptom.errors,
        onset=ONSET,
        window=TimeRange(start=T0, end=T0 + timedelta(minutes=45)),
        baseline=TimeRange(start=T0, end=T0 + timedelta(minutes=20)),
    )


def _change(cid: str, service: str, minute: float, **extra: Any) -> Change:
    record = {"id": cid, "ts": _at(minute), "service": service, "kind": "rollout", "summary": f"{service} rollout"}
    return Change.model_validate({"from_version": "v1", "to_version": "v2", **record, **extra})


def _changes_file(tmp_path: Path, *records: dict[str, Any]) -> Path:
    d = tmp_path / "inc"
    d.mkdir()
    (d / "incident.yaml").write_text(yaml.safe_dump(HEADER))
    (d / "changes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return d


ROLLOUT = {
    "id": "roll-1",
    "ts": "2026-03-01T13:50:00Z",
    "service": "api",
    "kind": "rollout",
    "summary": "api 2.0 canary",
    "from_version": "1.9",
    "to_version": "2.0",
}


# ---------------------------------------------------------------- the format


def test_a_rollout_keeps_its_steps_and_the_pods_of_each_version(tmp_path: Path) -> None:
    steps = [
        {"ts": "2026-03-01T13:51:00Z", "index": 1, "weight": 25, "pods": ["api-new-a"]},
        {"ts": "2026-03-01T13:58:00Z", "index": 2, "weight": 50, "pods": ["api-new-b"]},
    ]
    pods = {"1.9": ["api-old-a", "api-old-b"], "2.0": ["api-new-a", "api-new-b"]}
    recording, _ = load(_changes_file(tmp_path, {**ROLLOUT, "steps": steps, "pods": pods}))
    (change,) = recording.changes
    assert [s.weight for s in change.steps] == [25, 50] and change.steps[1].pods == ["api-new-b"]
    assert change.pods == pods


def test_malformed_rollouts_name_the_file_line_and_field(tmp_path: Path) -> None:
    records = [
        {**ROLLOUT, "id": "early-step", "steps": [{"ts": "2026-03-01T13:40:00Z"}]},
        {**ROLLOUT, "id": "backwards", "steps": [{"ts": "2026-03-01T13:58:00Z"}, {"ts": "2026-03-01T13:52:00Z"}]},
        {**ROLLOUT, "id": "ends-first", "end": "2026-03-01T13:30:00Z"},
        {**ROLLOUT, "id": "late-step", "end": "2026-03-01T13:55:00Z", "steps": [{"ts": "2026-03-01T13:59:00Z"}]},
        {**ROLLOUT, "id": "no-time", "steps": [{"weight": 10}]},
        {**ROLLOUT, "id": "too-heavy", "steps": [{"ts": "2026-03-01T13:52:00Z", "weight": 140}]},
        {**ROLLOUT, "id": "roll-1"},
        {**ROLLOUT, "id": "roll-1", "summary": "the same id again"},
    ]
    rendered = [str(p) for p in validate(_changes_file(tmp_path, *records))]
    for expected in (
        "changes.jsonl:1 [steps]: Value error, step 1 (2026-03-01T13:40:00+00:00) is before the change starts",
        "changes.jsonl:2 [steps]: Value error, step 2 (2026-03-01T13:52:00+00:00) is before step 1",
        "changes.jsonl:3 [end]: Value error, the change ends",
        "changes.jsonl:4 [steps]: Value error, step 1 (2026-03-01T13:59:00+00:00) is after the change ends",
        "changes.jsonl:5 [steps.0.ts]: Field required",
        "changes.jsonl:6 [steps.0.weight]",
        "changes.jsonl:8 [id]: duplicate id 'roll-1' (also on line 7)",
    ):
        assert any(expected in r for r in rendered), (expected, rendered)
    assert len(rendered) == 7, rendered


# ---------------------------------------------------------------- steps recorded as changes


def test_steps_recorded_as_changes_of_their_own_fold_into_their_rollout() -> None:
    start = _change("ad-start", "adservice", 20, pods={"v1": ["ad-1", "ad-2"], "v2": ["ad-3"]})
    step1 = _change("ad-step1", "adservice", 21)
    step2 = _change("ad-step2", "adservice", 27, pods={"v2": ["ad-4"]})
    other = _change("cur-start", "currencyservice", 22)
    again = _change("ad-v3", "adservice", 28).model_copy(update={"from_version": "v2", "to_version": "v3"})
    data = change_records([step2, other, start, step1, again], incident=_incident(), service=None, before_min=60)
    (ad,) = [c for c in data.changes if c.id == "ad-start"]
    assert ad.ids == ["ad-start", "ad-step1", "ad-step2"]
    assert [s.ts for s in ad.steps] == [T0 + timedelta(minutes=21), T0 + timedelta(minutes=27)]
    assert ad.pods == {"v1": ["ad-1", "ad-2"], "v2": ["ad-3", "ad-4"]}
    # another service's rollout, and another move of the same service, are changes of their own
    assert {c.id for c in data.changes} == {"ad-start", "cur-start", "ad-v3"}


def test_what_a_rollout_record_leaves_unknown_is_said() -> None:
    steps = [{"ts": _at(21), "index": 1}, {"ts": _at(24), "index": 3}]
    gapped = _change("gapped", "adservice", 20, steps=steps)
    bare = _change("bare", "cartservice", 22)
    data = change_records([gapped, bare], incident=_incident(), service=None, before_min=60)
    notes = {c.id: c.notes for c in data.changes}
    assert "step(s) 2 of its plan not recorded" in notes["gapped"]
    assert any("no end recorded" in n for n in notes["gapped"])
    assert "no steps recorded: its new version counts from its start" in notes["bare"]


def test_two_changes_with_one_id_keep_the_first_and_say_so() -> None:
    first = _change("dup", "adservice", 20)
    second = _change("dup", "cartservice", 25)
    data = change_records([second, first], incident=_incident(), service=None, before_min=60)
    assert [(c.id, c.service) for c in data.changes] == [("dup", "adservice")]
    assert data.notes and "two changes share the id 'dup'" in data.notes[0] and "cartservice" in data.notes[0]


def test_a_rollout_that_began_before_the_range_is_in_it_by_its_steps() -> None:
    long_ago = _change("slow", "adservice", -50, steps=[{"ts": _at(26)}])
    data = change_records([long_ago], incident=_incident(), service=None, before_min=30)
    assert [c.id for c in data.changes] == ["slow"]
    obs = Observation(
        id="c-1", action={"tool": "changes.list"}, source=SourceKind.changes, data=data, text="", tokens=1
    )
    # it counts as just before onset by its last step, 4 minutes before, not by its start 80 minutes before
    just_before = Expectation(op="change_before_onset", kinds=["rollout"], within_min=30)
    assert evaluate(just_before, obs, Context(incident=_incident(), service="adservice")).met


# ---------------------------------------------------------------- ranking concurrent changes


def _record(cid: str, service: str, minute: float, *, steps: list[float] = ()) -> ChangeRecord:
    (record,) = change_records(
        [_change(cid, service, minute, steps=[{"ts": _at(m)} for m in steps])],
        incident=_incident(),
        service=None,
        before_min=120,
    ).changes
    return record


def _versions(service: str, verdict: str, change_id: str) -> tuple[str, tuple[str, VersionsData]]:
    compared = VersionsData(service=service, change_id=change_id, verdict=verdict, reason=verdict)  # type: ignore[arg-type]
    return service, (f"m-{service}", compared)


def test_the_new_version_worse_outranks_a_clean_one_started_later() -> None:
    bad = _record("bad", "adservice", 24, steps=[25])
    clean = _record("clean", "currencyservice", 27, steps=[28])
    ranked = rank_changes(
        [("c-1", clean), ("c-1", bad)],
        incident=_incident(),
        versions=dict([_versions("adservice", "worse", "bad"), _versions("currencyservice", "no_worse", "clean")]),
        reachable=None,
        anomaly={},
    )
    assert [c.id for c in ranked] == ["bad", "clean"]
    assert ranked[0].step == 1 and ranked[0].minutes_before_onset == 5.0
    assert ranked[0].observation_ids == ["c-1", "m-adservice"]


def test_a_change_long_before_onset_or_out_of_the_alerts_reach_ranks_low() -> None:
    recent = _record("recent", "cartservice", 26)
    old = _record("old", "adservice", -30)
    beside = _record("beside", "emailservice", 27)
    after = _record("after", "paymentservice", 33)
    ranked = rank_changes(
        [("c", c) for c in (old, beside, after, recent)],
        incident=_incident(),
        versions={},
        reachable={"frontend", "cartservice", "adservice", "paymentservice"},
        anomaly={},
    )
    assert ranked[0].id == "recent"
    scores = {c.id: c.score for c in ranked}
    assert scores["old"] < scores["recent"] / 5
    assert scores["beside"] == scores["recent"] * ranking.UNREACHABLE_CHANGE
    assert scores["after"] < scores["beside"]
    (beside_ranked,) = [c for c in ranked if c.id == "beside"]
    assert not beside_ranked.reachable and any("does not reach" in w for w in beside_ranked.why)


def test_timing_weighs_full_just_before_onset_and_less_with_every_minute_after() -> None:
    assert ranking.change_timing(0) == ranking.change_timing(ranking.JUST_BEFORE_MIN) == 1.0
    later = ranking.JUST_BEFORE_MIN + ranking.CHANGE_HALF_LIFE_MIN
    assert ranking.change_timing(later) == 0.5
    assert ranking.change_timing(None) == ranking.AFTER_ONSET
    assert ranking.change_timing(120) < ranking.change_timing(30) < ranking.change_timing(15) < 1.0


def test_an_unseen_rollout_is_the_change_left_when_every_other_was_cleared() -> None:
    features = {
        "cart": {"version:unseen": ranking.VERSION_UNSEEN_WEIGHT},
        "email": {"version:no_worse": 0.01},
        "ad": {"version:no_worse": 0.01},
    }
    ranking.weigh_by_elimination(features)
    assert features["cart"]["version:unseen"] == ranking.VERSION_WORSE_WEIGHT
    # one measured worse elsewhere: the unseen one is not the change left
    features = {"cart": {"version:unseen": ranking.VERSION_UNSEEN_WEIGHT}, "ad": {"version:worse": 3.0}}
    ranking.weigh_by_elimination(features)
    assert features["cart"]["version:unseen"] == ranking.VERSION_UNSEEN_WEIGHT
    with ranking.without("elimination"):
        features = {"cart": {"version:unseen": 1.5}, "ad": {"version:no_worse": 0.01}}
        ranking.weigh_by_elimination(features)
        assert features["cart"]["version:unseen"] == 1.5


def test_changes_data_renders_steps_pods_and_notes() -> None:
    rollout = _change("r", "adservice", 20, steps=[{"ts": _at(21), "weight": 20}], pods={"v2": ["ad-9"]})
    data: ChangesData = change_records([rollout], incident=_incident(), service=None, before_min=60)
    from opsagent.observations import describe

    text = describe(data)
    assert "step 1 14:21 20 %" in text and "v2: ad-9" in text and "note: no end recorded" in text
