"""Metric evidence that holds on real data: each rule on a small hand-made incident.

Series are one-minute samples around an onset at minute 5 of a 10-minute window, with no baseline
of their own (the day's fault-free minute has no metrics), as in the Nezha recordings."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from opsagent import ranking
from opsagent.analysis.series import (
    PeerNoise,
    effect_ratio,
    min_effect,
    peer_noise,
    scan_groups,
    scan_stats,
)
from opsagent.catalog import SignalCatalog
from opsagent.features import profiles_from
from opsagent.fixtures import MetricSeries, SignalDef
from opsagent.models import Action, Incident, MetricsData, Observation, SourceKind, Symptom, TimeRange
from opsagent.naming import bad_way, is_volume, meaning_of, unit_of
from opsagent.stats import robust_spread

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CATALOG = SignalCatalog(
    {"cpu_usage": SignalDef(query='cpu_percent{service="$service"}', unit="percent", limit="vector(100)")}
)


def _incident() -> Incident:
    return Incident(
        id="inc-test",
        title="t",
        services=("front",),
        symptom=Symptom.latency,
        onset=T0 + timedelta(minutes=5),
        window=TimeRange(start=T0, end=T0 + timedelta(minutes=10)),
        baseline=TimeRange(start=T0 + timedelta(minutes=20), end=T0 + timedelta(minutes=23)),
    )


def _series(name: str, values: list[float], **labels: str) -> MetricSeries:
    start = T0.timestamp()
    return MetricSeries.model_validate(
        {"labels": {"__name__": name, **labels}, "samples": [[start + 60 * i, v] for i, v in enumerate(values)]}
    )


def _scan(series: list[MetricSeries]) -> MetricsData:
    from opsagent.analysis.series import as_rate, component_of

    services = {s.labels.get("service", "") for s in series} - {""}
    groups = scan_groups((s, component_of(s.labels, services), as_rate(s)) for s in series)
    incident = _incident()
    noise = peer_noise(groups, catalog=CATALOG, incident=incident)
    stats = [
        scan_stats(g, catalog=CATALOG, incident=incident, limit=None, peers=noise.get((g.metric, g.side)))
        for g in groups
    ]
    return MetricsData(stats=stats)


def _features(data: MetricsData) -> dict[str, dict[str, float]]:
    obs = Observation(
        id="m-1", action=Action(tool="metrics.scan"), source=SourceKind.metrics, data=data, text="", tokens=0
    )
    return {c: p.features for c, p in profiles_from([obs], _incident()).items()}


CALM = [1.0, 1.05, 0.95, 1.0, 1.02, 1.0, 0.98, 1.01, 1.0, 1.0]


def test_a_rise_from_near_zero_moves_by_level_over_the_smallest_effect_not_by_infinity() -> None:
    assert effect_ratio(0.133, 0.0, 1.0) == 1.0  # 0 -> 0.13 requests/s is no surge
    assert effect_ratio(5.0, 0.0, 0.1) == 50.0
    assert effect_ratio(5.0, 0.0, 0.0) == math.inf  # no floor known: the plain ratio


def test_the_smallest_effect_that_counts_comes_from_the_unit() -> None:
    assert min_effect(SignalDef(query="x", unit="s")) == 0.005
    assert min_effect(SignalDef(query="x", unit="ms")) == 5.0
    assert min_effect(SignalDef(query="x", unit="s", min_delta=0.1)) == 0.1  # its own wins


def test_names_say_unit_bad_way_volume_and_meaning() -> None:
    assert unit_of("pod_server_latency_p99_seconds") == "s" and unit_of("pod_cpu_usage_millicores") == "millicores"
    assert bad_way("edge_latency_p90_seconds") == "up" and bad_way("pod_success_rate_percent") == "down"
    assert bad_way("pod_network_receive_bytes") == "any"
    assert is_volume("pod_network_receive_bytes") and not is_volume("http_request_errors_total")
    assert meaning_of("edge_success_rate_percent") == "errors" and meaning_of("pod_latency_ms") == "latency"


def test_a_jump_its_peers_make_all_the_time_is_not_evidence() -> None:
    # Every service's per-pod percentile jumps between x0.01 and x100 from one minute to the next.
    jittery = [_series("p99_ms", [5, 500, 5, 5, 500, 5, 5, 5, 5, 5], service=f"svc{i}") for i in range(8)]
    shifted = _series("p99_ms", [5, 5, 5, 5, 5, 500, 500, 500, 500, 500], service="culprit")
    data = _scan([*jittery, shifted])
    culprit = next(s for s in data.stats if s.component == "culprit")
    assert culprit.direction == "flat" and culprit.peer_surprise is not None and culprit.peer_surprise >= 0.05
    with ranking.without("peer_noise"):
        assert next(s for s in _scan([*jittery, shifted]).stats if s.component == "culprit").direction == "up"


def test_the_same_jump_among_steady_peers_is_evidence() -> None:
    steady = [_series("p99_ms", [5 + (i + t) % 2 * 0.2 for t in range(10)], service=f"svc{i}") for i in range(8)]
    shifted = _series("p99_ms", [5, 5, 5, 5, 5, 500, 500, 500, 500, 500], service="culprit")
    culprit = next(s for s in _scan([*steady, shifted]).stats if s.component == "culprit")
    assert culprit.direction == "up" and culprit.peer_surprise == 0.0


def test_peer_noise_needs_enough_jumps() -> None:
    assert PeerNoise((0.1, 0.2), 0.0).surprise(10.0, 1.0) is None


def test_node_series_belong_to_the_node_not_to_each_service_on_it() -> None:
    node = [0.2, 0.2, 0.2, 0.2, 0.2, 5.0, 5.0, 5.0, 5.0, 5.0]
    series = [_series("node_network_receive_bytes", node, service=s, pod=f"{s}-abc12") for s in ("a", "b", "c")]
    data = _scan(series)
    assert {s.scope for s in data.stats} == {"node"} and len({s.node for s in data.stats}) == 1
    features = _features(data)
    assert all(not any(k.startswith("signal:") for k in f) for f in features.values())
    assert ranking.own_score(features["a"]) == 0.0
    with ranking.without("node_scope"):
        assert ranking.own_score(_features(_scan(series))["a"]) > 0


def test_a_client_side_latency_is_the_dependencies_doing() -> None:
    data = _scan([_series("pod_client_latency_p99_seconds", [0.01] * 5 + [2.0] * 5, service="caller")])
    features = _features(data)["caller"]
    assert "deps:pod_client_latency_p99_seconds:up" in features
    assert ranking.own_score(features) == 0.0


def test_volume_a_callee_receives_is_its_callers_doing() -> None:
    features = _features(_scan([_series("pod_network_receive_bytes", [1e4] * 5 + [1e6] * 5, service="db")]))["db"]
    assert "load:pod_network_receive_bytes:up" in features
    assert ranking.own_score(features, called=True) == 0.0
    assert ranking.own_score(features, called=False) > 0  # traffic arriving from outside is its own


def test_one_spike_among_a_handful_of_samples_is_not_the_spread() -> None:
    spiky = [8.3, 0.175, 0.175, 0.21]
    assert robust_spread(spiky, 0.19) < 0.1
    with ranking.without("spike_free"):
        assert robust_spread(spiky, 0.19) > 1.0


def test_cpu_rise_of_one_service_is_its_own_anomaly() -> None:
    data = _scan(
        [_series("cpu_percent", [10.0] * 5 + [95.0] * 5, service="hot")]
        + [_series("cpu_percent", [c * 10 for c in CALM], service=f"cool{i}") for i in range(4)]
    )
    features = _features(data)
    assert "signal:cpu_usage:up" in features["hot"]
    assert all("signal:cpu_usage:up" not in features.get(f"cool{i}", {}) for i in range(4))
