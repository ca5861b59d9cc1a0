"""Canary analysis: a rollout's new version against its old one, same minutes, same traffic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from opsagent.analysis.versions import compare_versions
from opsagent.fixtures import MetricSeries
from opsagent.models import Incident, Symptom, TimeRange

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
    found = compare_versions([*old, new], service="adservice", incident=_incident())
    assert not any(c.worse for c in found.comparisons) and found.verdict == "no_worse"


def test_one_version_only_is_nothing_to_compare() -> None:
    found = compare_versions([_old("ad-v1-a", 100)], service="adservice", incident=_incident())
    assert found.verdict == "unknown" and found.new_version is None
