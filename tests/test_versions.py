"""Canary analysis: a rollout's new version against its old one, same minutes, same traffic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from opsagent.analysis.versions import compare_versions
from opsagent.fixtures import MetricSeries
from opsagent.models import ChangeRecord, Incident, RolloutStep, Symptom, TimeRange

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _incident() -> Incident:
    return Incident(
        id="inc-canary",
        title="t",
        services=("frontend",),
        symptom=Symptom.errors,
        onset=T0 + timedelta(minutes=12),
        window=TimeRange(start=T0, end=T0 + timedelta(minutes=20)),
        baseline=TimeRange(start=T0, end=T0 + timedelta(minutes=5)),
    )


def _pod(name: str, version: str, values: dict[int, float], metric: str = "edge_success_rate_percent") -> MetricSeries:
    labels = {"__name__": metric, "service": "adservice", "pod": name, "version": version}
    if metric.startswith("edge_"):
        labels.update(caller="frontend", callee="adservice", side="destination")
    samples = [[(T0 + timedelta(minutes=m)).timestamp(), v] for m, v in sorted(values.items())]
    return MetricSeries.model_validate({"labels": labels, "samples": samples})


def _old(name: str, value: float, metric: str = "edge_success_rate_percent") -> MetricSeries:
    return _pod(name, "v1", {m: value + (m % 3) * 0.01 for m in range(20)}, metric)


def test_a_new_version_that_fails_is_worse() -> None:
    new = _pod("ad-v2-a", "v2", {m: 30.0 + m % 4 for m in range(12, 20)})
    found = compare_versions(
        [_old("ad-v1-a", 100), _old("ad-v1-b", 100), new], service="adservice", incident=_incident()
    )
    assert found.verdict == "worse" and found.new_version == "v2" and found.old_version == "v1"
    assert found.new_pods == ["ad-v2-a"] and found.since == T0 + timedelta(minutes=12)
    worst = next(c for c in found.comparisons if c.worse)
    assert worst.meaning == "errors" and worst.p_value is not None and worst.p_value < 0.01


def test_a_new_version_that_behaves_like_the_old_is_no_worse() -> None:
    new = _pod("ad-v2-a", "v2", {m: 100.0 - (m % 2) * 0.02 for m in range(12, 20)})
    found = compare_versions(
        [_old("ad-v1-a", 100), _old("ad-v1-b", 100), new], service="adservice", incident=_incident()
    )
    assert found.verdict == "no_worse"


def test_a_replaced_pod_carrying_the_new_pods_values_is_not_the_old_version() -> None:
    new_values = {m: 30.0 + m % 4 for m in range(12, 20)}
    replaced = _pod("ad-v1-z", "v1", {**{m: 100.0 for m in range(12)}, **new_values})
    new = _pod("ad-v2-a", "v2", new_values)
    found = compare_versions([_old("ad-v1-a", 100), replaced, new], service="adservice", incident=_incident())
    success = next(c for c in found.comparisons if c.metric == "edge_success_rate_percent")
    assert success.old_median > 99 and success.worse


def test_too_few_samples_of_the_new_version_decide_nothing() -> None:
    new = _pod("ad-v2-a", "v2", {18: 100.0, 19: 100.0})
    found = compare_versions([_old("ad-v1-a", 100), new], service="adservice", incident=_incident())
    assert found.verdict == "unknown" and "no error or latency figure" in found.reason


def test_fresh_pods_memory_differs_but_never_decides() -> None:
    new = _pod("ad-v2-a", "v2", {m: 80.0 for m in range(12, 20)}, metric="pod_memory_usage_rate_percent")
    old = [_old(f"ad-v1-{i}", 5.0, metric="pod_memory_usage_rate_percent") for i in "ab"]
    found = compare_versions([*old, new], service="adservice", incident=_incident())
    assert found.verdict == "unknown" and not any(c.worse for c in found.comparisons)


def test_a_few_milliseconds_of_a_fresh_pod_are_not_a_regression() -> None:
    metric = "edge_latency_p90_seconds"
    new = _pod("ad-v2-a", "v2", {m: 0.0093 + (m % 2) * 0.0001 for m in range(12, 20)}, metric=metric)
    old = [_old(f"ad-v1-{i}", 0.0046, metric=metric) for i in "ab"]
    healthy = _pod("ad-v2-a", "v2", {m: 100.0 for m in range(12, 20)})
    found = compare_versions([*old, new, _old("ad-v1-a", 100), healthy], service="adservice", incident=_incident())
    assert not any(c.worse for c in found.comparisons) and found.verdict == "no_worse"


def test_a_release_compared_on_its_latency_alone_is_not_cleared() -> None:
    # Its error figures are not measured per version: a release that fails (a wrong value, an exception
    # its callers count) is not shown innocent by being as fast as the old one.
    metric = "edge_latency_p90_seconds"
    new = _pod("ad-v2-a", "v2", {m: 0.0046 + (m % 2) * 0.0001 for m in range(12, 20)}, metric=metric)
    old = [_old(f"ad-v1-{i}", 0.0046, metric=metric) for i in "ab"]
    found = compare_versions([*old, new], service="adservice", incident=_incident())
    assert found.verdict == "unknown" and "no error figure" in found.reason


def test_one_version_only_is_nothing_to_compare() -> None:
    found = compare_versions([_old("ad-v1-a", 100)], service="adservice", incident=_incident())
    assert found.verdict == "unknown" and found.new_version is None


# ---------------------------------------------------------------- with the rollout's record


def _rollout(pods: dict[str, list[str]] | None = None, steps: tuple[int, ...] = (12,)) -> ChangeRecord:
    return ChangeRecord(
        id="roll-ad",
        ts=T0 + timedelta(minutes=11),
        service="adservice",
        kind="rollout",
        summary="adservice v2",
        from_version="v1",
        to_version="v2",
        minutes_before_onset=1,
        steps=[RolloutStep(ts=T0 + timedelta(minutes=m)) for m in steps],
        pods=pods or {},
    )


def _unlabelled(series: MetricSeries) -> MetricSeries:
    return series.model_copy(update={"labels": {k: v for k, v in series.labels.items() if k != "version"}})


def test_the_rollouts_pods_of_each_version_place_series_that_carry_no_version() -> None:
    new = _unlabelled(_pod("ad-b", "v2", {m: 30.0 + m % 4 for m in range(12, 20)}))
    old = [_unlabelled(_old("ad-a", 100)), _unlabelled(_old("ad-c", 100))]
    rollout = _rollout({"v1": ["ad-a", "ad-c"], "v2": ["ad-b"]})
    found = compare_versions([*old, new], service="adservice", incident=_incident(), rollout=rollout)
    assert found.verdict == "worse" and found.change_id == "roll-ad"
    assert (found.new_version, found.old_version) == ("v2", "v1") and found.new_pods == ["ad-b"]
    assert found.started == rollout.ts
    # without the record, nothing says which pod runs which version
    assert compare_versions([*old, new], service="adservice", incident=_incident()).verdict == "unknown"


def test_a_new_version_that_reports_nothing_is_unseen_once_it_should_have() -> None:
    old = [_old("ad-a", 100), _old("ad-c", 100)]
    found = compare_versions(old, service="adservice", incident=_incident(), rollout=_rollout(steps=(12,)))
    assert found.verdict == "unseen" and found.new_version == "v2" and found.old_version == "v1"
    assert "v2 reports no sample 7 min after its rollout's first step at 12:12" in found.reason
    # a minute after its first step, silence says nothing yet
    soon = compare_versions(old, service="adservice", incident=_incident(), rollout=_rollout(steps=(18,)))
    assert soon.verdict == "unknown" and "reported nothing yet" in soon.reason


def test_a_new_version_nobody_calls_is_not_unseen() -> None:
    # Its callers stopped calling at minute 12 (a caller failing before it calls): the old version's
    # pods still report their resources, but no call reaches either version.
    calls = [_pod(f"ad-{p}", "v1", {m: 100.0 for m in range(13)}) for p in "ac"]
    cpu = [_old(f"ad-{p}", 20.0, metric="pod_cpu_usage_rate_percent") for p in "ac"]
    found = compare_versions([*calls, *cpu], service="adservice", incident=_incident(), rollout=_rollout(steps=(12,)))
    assert found.verdict == "unknown", found.reason
    assert "nothing calls adservice since 12:12" in found.reason
    # called all along, the same silence is the new version's
    called = [_old(f"ad-{p}", 100) for p in "ac"]
    assert compare_versions([*called, *cpu], service="adservice", incident=_incident(), rollout=_rollout()).verdict == (
        "unseen"
    )


def _edge(caller: str, callee: str, values: dict[int, float]) -> MetricSeries:
    labels = {"__name__": "edge_success_rate_percent", "caller": caller, "callee": callee, "side": "destination"}
    samples = [[(T0 + timedelta(minutes=m)).timestamp(), v] for m, v in sorted(values.items())]
    return MetricSeries.model_validate({"labels": labels, "samples": samples})


def _answering(failing_from: int, *, other_callee: float = 100.0) -> dict[str, object]:
    """A clean v2 of adservice serving from minute 12, and the calls into and out of its caller, the
    frontend, whose served calls fail from ``failing_from``."""
    new = _pod("ad-v2-a", "v2", {m: 100.0 - (m % 2) * 0.02 for m in range(12, 20)})
    series = [_old("ad-v1-a", 100), _old("ad-v1-b", 100), new]
    calls = [
        _edge("loadgen", "frontend", {m: 100.0 if m < failing_from else 20.0 + m % 3 for m in range(20)}),
        _edge("frontend", "adservice", {m: 100.0 for m in range(20)}),
        _edge("frontend", "cartservice", {m: 100.0 if m < 12 else other_callee for m in range(20)}),
    ]
    return {"series": series, "callers": calls}


def test_a_release_whose_caller_fails_as_it_begins_to_serve_is_not_cleared_by_its_own_figures() -> None:
    # A release that answers wrongly (a wrong value, a misordered parameter) succeeds by its own
    # figures while the service calling it fails every request.
    args = _answering(failing_from=12)
    found = compare_versions(args["series"], service="adservice", incident=_incident(), callers=args["callers"])  # type: ignore[arg-type]
    assert found.verdict == "unknown", found.reason
    assert "frontend, which calls adservice, began failing as v2 began to serve" in found.reason
    assert "edge_success_rate_percent 100 -> " in found.reason


def test_a_callers_failure_the_release_does_not_explain_leaves_it_cleared() -> None:
    def verdict(**kw: object) -> str:
        args = _answering(**kw)  # type: ignore[arg-type]
        return compare_versions(
            args["series"],
            service="adservice",
            incident=_incident(),
            callers=args["callers"],  # type: ignore[arg-type]
        ).verdict

    assert verdict(failing_from=9) == "no_worse"  # failing before v2 served
    assert verdict(failing_from=15) == "no_worse"  # well for three minutes while v2 served
    assert verdict(failing_from=12, other_callee=60.0) == "no_worse"  # another callee fails its calls
    assert (
        compare_versions(
            _answering(failing_from=12)["series"],
            service="adservice",
            incident=_incident(),  # type: ignore[arg-type]
        ).verdict
        == "no_worse"
    )  # nothing known of its callers


def test_a_rollout_naming_versions_no_series_carries_is_not_unseen() -> None:
    old = [_old("ad-a", 100)]
    rollout = _rollout().model_copy(update={"from_version": "1.4.0", "to_version": "1.5.0"})
    found = compare_versions(old, service="adservice", incident=_incident(), rollout=rollout)
    assert found.verdict == "unknown" and "which no series names" in found.reason


def test_a_callers_view_of_its_calls_carries_the_callers_version_not_the_callees() -> None:
    # the frontend's v2 sidecar sees adservice fail: that is no version of adservice
    caller_side = _pod("frontend-v2-x", "v2", {m: 30.0 for m in range(12, 20)}).model_copy(
        update={
            "labels": {
                "__name__": "edge_success_rate_percent",
                "service": "frontend",
                "pod": "frontend-v2-x",
                "version": "v2",
                "caller": "frontend",
                "callee": "adservice",
                "side": "source",
            }
        }
    )
    found = compare_versions([_old("ad-a", 100), caller_side], service="adservice", incident=_incident())
    assert found.verdict == "unknown" and found.new_version is None


def test_series_with_no_version_are_counted_and_left_out() -> None:
    new = _pod("ad-v2-a", "v2", {m: 100.0 for m in range(12, 20)})
    stray = _unlabelled(_old("ad-x", 100))
    found = compare_versions([_old("ad-v1-a", 100), stray, new], service="adservice", incident=_incident())
    assert found.notes == ["1 series of pods of adservice carry no version, nor name a pod of a known one"]


def test_a_shift_every_pod_makes_while_new_pods_replace_old_ones_is_no_version_s() -> None:
    # Errors rise for every pod from minute 14 (a dependency fails); new pods replace old ones over time,
    # so most old samples are from before the rise and most new ones after it.
    def level(m: int) -> float:
        return 95.0 if m >= 14 else 100.0

    olds = [_pod(f"ad-v1-{i}", "v1", {m: level(m) + (m % 3) * 0.1 for m in range(10, 12 + 2 * i)}) for i in range(4)]
    news = [_pod(f"ad-v2-{i}", "v2", {m: level(m) + (m % 2) * 0.1 for m in range(12 + 2 * i, 20)}) for i in range(4)]
    found = compare_versions([*olds, *news], service="adservice", incident=_incident())
    assert found.verdict == "no_worse", found.reason
    (success,) = found.comparisons
    assert success.minutes >= 5 and success.old_median > success.new_median  # pooled, the new looks worse


def test_a_success_rate_that_fell_from_its_ceiling_is_not_a_quiet_component() -> None:
    # 99.9% -> 76% is x0.76 as a ratio but two hundred times the failures: the deploy-regression
    # playbook's refutation ("none of its series moved") must not clear the release on it.
    from opsagent.models import Action, MetricsData, Observation, SeriesStats, SourceKind
    from opsagent.playbooks import Context, Expectation, evaluate

    fell = SeriesStats(
        signal="availability",
        component="adservice",
        query="success_rate",
        unit="percent",
        series=1,
        baseline_mean=99.9,
        baseline_std=0.05,
        window_mean=76.0,
        window_max=99.9,
        peak_ratio=1.0,
        mean_ratio=76.0 / 99.9,
        z_score=-40.0,
        change_point=None,
        direction="down",
    )
    obs = Observation(
        id="m-1",
        action=Action(tool="metrics.scan"),
        source=SourceKind.metrics,
        data=MetricsData(stats=[fell]),
        text="",
        tokens=1,
    )
    quiet = Expectation(op="component_quiet", min_ratio=1.5)
    outcome = evaluate(quiet, obs, Context(incident=_incident(), service="adservice"))
    assert outcome.met is False
    steady = obs.model_copy(
        update={"data": MetricsData(stats=[fell.model_copy(update={"window_mean": 99.85, "direction": "flat"})])}
    )
    assert evaluate(quiet, steady, Context(incident=_incident(), service="adservice")).met is True
