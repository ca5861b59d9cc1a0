"""Signal discovery: metric names the catalog has never seen, mapped to its signals by convention."""

from __future__ import annotations

from opsagent.catalog import default_catalog
from opsagent.discovery import discover, metric_names
from opsagent.fixtures import MetricSeries, SignalDef


def _s(name: str, **labels: str) -> MetricSeries:
    return MetricSeries.model_validate({"labels": {"__name__": name, **labels}, "samples": [[0, 1.0]]})


SERIES = [
    *(_s(f"pod_server_latency_{p}_seconds", service=svc) for p in ("p50", "p90", "p99") for svc in ("a", "b", "c")),
    *(_s("pod_client_latency_p99_seconds", service=svc) for svc in ("a", "b", "c")),
    _s("frontend_latency_p99_seconds", service="web"),
    *(_s("pod_cpu_usage_millicores", service=svc) for svc in ("a", "b")),
    *(_s("pod_cpu_usage_rate_percent", service=svc) for svc in ("a", "b")),
    *(_s("node_cpu_usage_rate_percent", service=svc) for svc in ("a", "b", "c")),
    *(_s("pod_memory_usage_rate_percent", service=svc) for svc in ("a", "b")),
    _s("edge_latency_p90_seconds", caller="a", callee="b", side="source"),
    _s("edge_latency_p90_seconds", caller="a", callee="b", side="destination"),
    _s("edge_success_rate_percent", caller="a", callee="b", side="destination"),
    *(_s("pod_workload_ops", service=svc) for svc in ("a", "b")),
]


def test_the_served_tail_percentile_of_the_most_services_is_the_latency() -> None:
    found = discover(SERIES)
    assert found["latency_p99"].query == 'pod_server_latency_p99_seconds{service="$service"}'
    assert found["latency_p99"].unit == "s"


def test_cpu_and_memory_as_a_share_of_the_limit_read_against_a_ceiling() -> None:
    found = discover(SERIES)
    assert (
        found["cpu_usage"].query.startswith("pod_cpu_usage_rate_percent") and found["cpu_usage"].limit == "vector(100)"
    )
    assert found["memory_usage"].limit == "vector(100)"


def test_edges_give_the_callers_view_of_latency_and_the_callees_success_rate() -> None:
    found = discover(SERIES)
    assert found["client_latency_p99"].query == 'edge_latency_p90_seconds{callee="$service", side="source"}'
    assert found["client_latency_p99"].scope == "edge"
    assert found["availability"].query == 'edge_success_rate_percent{callee="$service", side="destination"}'
    assert found["availability"].direction == "down"
    assert found["request_rate"].query == 'pod_workload_ops{service="$service"}'


def test_an_explicit_signal_wins_and_a_default_the_environment_has_stays() -> None:
    explicit = {"latency_p99": SignalDef(query='my_latency{service="$service"}', unit="s")}
    present = metric_names(SERIES) | {"process_cpu_usage_ratio"}
    catalog = default_catalog().merged(explicit).with_discovered(discover(SERIES), present)
    assert catalog.query("latency_p99", "a") == 'my_latency{service="a"}'
    assert catalog.query("cpu_usage", "a") == 'process_cpu_usage_ratio{service="a"}'  # the default's metric is here
    assert catalog.query("memory_usage", "a") == 'pod_memory_usage_rate_percent{service="a"}'  # a gap, filled


def test_nothing_to_discover_changes_nothing() -> None:
    catalog = default_catalog()
    assert catalog.with_discovered(discover([]), set()).signals == catalog.signals
