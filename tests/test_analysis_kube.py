"""The Kubernetes object analyzers (opsagent/analysis/kube.py) over small clusters written for them
(tests/data/kube/clusters.yaml): each names the broken object, its component, the field that shows
it, the kind it points to and the services it takes down, and keeps quiet about what is not broken."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from opsagent.analysis.kube import (
    MIN_FAILED_CONNECTS,
    analyze,
    exhausted_backends,
    explain_exits,
    read_only_stores,
    unanswered_dependencies,
    unreachable_dependencies,
    unrouted_paths,
)
from opsagent.fixtures import KubeObject
from opsagent.kubestate import Cluster, since_onset
from opsagent.models import KubeFinding

CLUSTERS: dict[str, list[dict[str, Any]]] = yaml.safe_load(
    (Path(__file__).parent / "data" / "kube" / "clusters.yaml").read_text()
)
ONSET = datetime(2026, 5, 4, 10, 10, tzinfo=UTC)


def findings(name: str) -> list[KubeFinding]:
    cluster = Cluster(KubeObject.model_validate(o) for o in CLUSTERS[name])
    return analyze(cluster, since=since_onset(ONSET))


@pytest.mark.parametrize(
    ("cluster", "component", "component_type", "sign", "kind", "field", "affects"),
    [
        (
            "quota",
            "shop",
            "namespace",
            "quota_exceeded",
            "scheduling_failure",
            "events[FailedCreate].message",
            ["cart"],
        ),
        ("refused", "mailer", "workload", "pods_refused", "config_change", "events[FailedCreate].message", ["mailer"]),
        ("scaled_to_zero", "pricing", "workload", "scaled_to_zero", "config_change", "spec.replicas", ["pricing"]),
        ("scheduler_silent", "cp-1", "node", "scheduler_silent", "scheduling_failure", None, ["cart"]),
        ("probe_kills", "cart", "workload", "probe_kills", "probe_failure", "events[Killing].message", ["cart"]),
        ("missing_secret", "auth", "workload", "missing_reference", "config_change", None, ["auth"]),
    ],
)
def test_each_analyzer_names_the_broken_object(
    cluster: str, component: str, component_type: str, sign: str, kind: str, field: str | None, affects: list[str]
) -> None:
    found = findings(cluster)
    assert [(f.component, f.component_type, f.sign, f.kind) for f in found] == [(component, component_type, sign, kind)]
    assert found[0].affects == affects
    if field is not None:
        assert found[0].field == field


@pytest.mark.parametrize(
    ("cluster", "direct"),
    [
        ("quota", True),  # the API's FailedCreate says "exceeded quota"
        ("refused", True),  # ... or names the ServiceAccount it cannot find
        ("scaled_to_zero", True),  # spec.replicas, scaled down since onset
        ("missing_secret", True),  # CreateContainerConfigError names the Secret
        ("unschedulable", True),  # the scheduler's reason: no node has the CPU
        ("service_selector", True),  # spec.selector matches no pod
        ("node_down", True),  # the node's Ready condition
        ("claim_missing", False),  # a claim that does not exist: who should have made it?
        ("scheduler_silent", False),  # read from what is absent
        ("probe_kills", False),  # a probe fails on a wrong port and on an overloaded container alike
        ("crash_loop", False),  # says that the container exits, not why
    ],
)
def test_a_finding_is_direct_only_where_its_field_names_the_fault_itself(cluster: str, direct: bool) -> None:
    """The judge confirms on a direct finding alone (opsagent.judge.object_evidence), so a finding is
    direct only where the object's own field says what broke."""
    (found,) = findings(cluster)
    assert found.direct is direct, found


def test_a_namespace_quota_is_named_with_the_refusal_that_shows_it() -> None:
    (quota,) = findings("quota")
    assert quota.object == "Namespace/shop"
    assert "exceeded quota: pods-quota" in quota.why and "0/1 replicas ready" in quota.why


def test_a_workload_parked_at_zero_long_before_the_incident_is_not_a_finding() -> None:
    assert [f.component for f in findings("scaled_to_zero")] == ["pricing"]


def test_workloads_on_a_node_that_is_down_are_the_nodes_finding() -> None:
    """cart's pod sits on the node that stopped reporting; search can only run there (the scheduler
    names the node's unreachable taint): one finding, on the node, affecting cart."""
    found = findings("node_down")
    assert [(f.component, f.component_type, f.sign) for f in found] == [("node-b", "node", "node_not_ready")]
    assert found[0].affects == ["cart"] and found[0].kind == "unknown"
    assert "NotReady (NodeStatusUnknown)" in found[0].why


def test_a_container_that_exits_by_itself_and_restarts_is_a_crash_loop_not_a_probe() -> None:
    (f,) = findings("crash_loop")
    assert (f.sign, f.kind) == ("unavailable", "crash_loop")
    assert "last exit Error (1)" in f.why


@pytest.mark.parametrize(
    ("last_line", "sign", "kind"),
    [
        (
            "Caused by: java.net.UnknownHostException: orders-db: Temporary failure in name resolution",
            "exits_on_dns",
            "dns_failure",
        ),
        (
            "java.sql.SQLException: Access denied for user 'app'@'10.0.0.7' (using password: YES)",
            "exits_on_auth",
            "config_change",
        ),
        ("Caused by: java.net.ConnectException: Connection refused", "exits_on_refused", "config_change"),
    ],
)
def test_a_crash_loop_names_what_its_containers_last_lines_say_stops_them(last_line: str, sign: str, kind: str) -> None:
    (f,) = explain_exits(findings("crash_loop"), {"cart": ["starting", last_line, "Application run failed"]})
    assert (f.component, f.sign, f.kind) == ("cart", sign, kind)
    assert last_line.split(":")[-1].strip() in f.why and f.field.endswith("container log")


def test_a_name_that_does_not_resolve_outranks_the_refused_connection_it_causes() -> None:
    said = ["Communications link failure: Connection refused", "UnknownHostException: orders-db"]
    (f,) = explain_exits(findings("crash_loop"), {"cart": said})
    assert f.kind == "dns_failure"


def test_last_lines_that_name_no_cause_leave_the_crash_loop_and_other_findings_alone() -> None:
    (loop,) = explain_exits(findings("crash_loop"), {"cart": ["NullPointerException at Main.java:12"]})
    assert (loop.sign, loop.kind) == ("unavailable", "crash_loop")
    quota = findings("quota")
    assert explain_exits(quota, {"shop": ["Access denied"], "cart": ["Access denied"]}) == quota


def test_a_service_whose_selector_matches_no_pod_is_the_broken_object() -> None:
    (f,) = findings("service_selector")
    assert (f.component, f.component_type, f.object) == ("cart", "service", "Service/shop/cart")
    assert (f.sign, f.kind, f.field, f.affects) == (
        "selector_matches_nothing",
        "config_change",
        "spec.selector",
        ["cart"],
    )
    assert "app=carts" in f.why


def test_a_service_sending_to_a_port_or_protocol_its_pods_do_not_serve_is_named_with_the_field() -> None:
    found = {f.component: f for f in findings("service_ports")}
    assert (found["cart"].sign, found["cart"].field) == ("target_port_not_exposed", "spec.ports[0].targetPort")
    assert "8081" in found["cart"].why and "8080" in found["cart"].why
    assert (found["orders"].sign, found["orders"].field) == ("protocol_mismatch", "spec.ports[0].protocol")
    assert {f.kind for f in found.values()} == {"config_change"}


def test_a_service_whose_pods_are_missing_for_its_workloads_reason_is_not_a_finding_of_its_own() -> None:
    found = findings("service_of_parked_workload")
    assert [(f.object, f.sign) for f in found] == [("Deployment/shop/pricing", "scaled_to_zero")]


def test_a_container_whose_init_the_runtime_oom_kills_is_an_oom_kill_not_a_crash_loop() -> None:
    """The runtime's Failed (or FailedCreatePodSandBox) event says the container's init was OOM-killed."""
    (f,) = findings("oom_at_start")
    assert (f.component, f.kind, f.field) == ("web", "oom_kill", "events[Failed].message")
    assert "OOM-killed" in f.why


def test_a_healthy_cluster_and_an_event_about_no_object_give_no_finding() -> None:
    assert findings("healthy") == []


def test_a_workload_short_handed_but_still_serving_takes_no_service_down() -> None:
    """One of two replicas cannot be placed: the workload is broken and says why, but it still serves,
    so no caller is explained away by it."""
    (f,) = findings("short_handed")
    assert (f.component, f.sign, f.kind) == ("cart", "unschedulable", "scheduling_failure")
    assert "Insufficient memory" in f.why and f.affects == []


def _cannot_connect(said: dict[str, list[str]], name: str = "callers_cannot_connect") -> list[KubeFinding]:
    cluster = Cluster(KubeObject.model_validate(o) for o in CLUSTERS[name])
    since = since_onset(ONSET)
    return unreachable_dependencies(cluster, analyze(cluster, since=since), said, since=since)


def test_a_component_its_callers_cannot_reach_while_its_pods_are_ready_is_a_service_that_routes_nowhere() -> None:
    """web cannot connect to cart on the port cart's pods serve, and cart's pods are ready: nothing in
    cart's pods is broken, so the route to them is (its Service), and web only reports it."""
    line = "RedisConnectionException: UnableToConnect on cart.shop.svc.cluster.local:6379/Interactive"
    (f,) = _cannot_connect({"web": ["GET /cart", line] * MIN_FAILED_CONNECTS, "cart": [], "orders": []})
    assert (f.component, f.component_type, f.object) == ("cart", "service", "Service/shop/cart")
    assert (f.sign, f.kind, f.affects) == ("unreachable_while_ready", "config_change", ["cart"])
    assert "web cannot connect to cart:6379" in f.why and "UnableToConnect" in f.why


def test_a_caller_that_dials_a_port_its_dependency_does_not_serve_has_the_wrong_address() -> None:
    line = "UnableToConnect on cart:6380/Interactive, Initializing/NotStarted"
    (f,) = _cannot_connect({"web": [line] * MIN_FAILED_CONNECTS})
    assert (f.component, f.component_type, f.sign, f.kind) == (
        "web",
        "workload",
        "dials_unserved_port",
        "config_change",
    )
    assert f.affects == ["web"] and "cart serves 6379" in f.why


def test_a_probe_known_only_as_kubectl_describes_it_still_gives_the_port_a_component_serves() -> None:
    """A recording made from `kubectl describe` holds cart's probes as text (`tcp-socket :6379 …`,
    `http-get http://:8080/healthz …`): cart serves 6379 and 8080, so web dialling 6380 has the wrong
    address, and web dialling 6379 finds no route to cart's ready pods."""
    wrong = "UnableToConnect on cart:6380/Interactive, Initializing/NotStarted"
    (f,) = _cannot_connect({"web": [wrong] * MIN_FAILED_CONNECTS}, "callers_cannot_connect_described")
    assert (f.component, f.sign, f.affects) == ("web", "dials_unserved_port", ["web"])
    assert "cart serves 6379, 8080" in f.why
    right = "UnableToConnect on cart:6379/Interactive, Initializing/NotStarted"
    (g,) = _cannot_connect({"web": [right] * MIN_FAILED_CONNECTS}, "callers_cannot_connect_described")
    assert (g.component, g.sign, g.affects) == ("cart", "unreachable_while_ready", ["cart"])


IP_REFUSED = (
    'details = "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.68.14.88:{port}: Connection refused"'
)


def test_a_caller_that_dials_an_ip_on_a_port_no_component_serves_has_the_wrong_address() -> None:
    """Every component runs, and none declares 9001 (cart serves 6379, orders 9000): web's address
    answers nowhere. An IP on a port a component serves says nothing: it may be that component's."""
    (f,) = _cannot_connect({"web": [IP_REFUSED.format(port=9001)] * MIN_FAILED_CONNECTS})
    assert (f.component, f.component_type, f.sign, f.kind, f.affects) == (
        "web",
        "workload",
        "dials_unserved_port",
        "config_change",
        ["web"],
    )
    assert "10.68.14.88:9001" in f.why and "no Service, container or probe of the read serves port 9001" in f.why
    assert _cannot_connect({"web": [IP_REFUSED.format(port=9000)] * 10}) == []
    assert _cannot_connect({"web": [IP_REFUSED.format(port=9001)] * (MIN_FAILED_CONNECTS - 1)}) == []


def test_an_ip_on_an_unknown_port_blames_no_caller_while_a_component_is_out_of_service() -> None:
    """mail has no running pod, so the read cannot say which ports its Service serves: 9001 may be
    mail's, and web's failures are mail's outage (its own finding), not web's address."""
    cluster = Cluster(KubeObject.model_validate(o) for o in CLUSTERS["callers_cannot_connect_one_down"])
    since = since_onset(ONSET)
    (down,) = analyze(cluster, since=since)
    assert (down.component, down.affects) == ("mail", ["mail"])
    said = {"web": [IP_REFUSED.format(port=9001)] * 10}
    assert unreachable_dependencies(cluster, [down], said, since=since) == []


@pytest.mark.parametrize(
    "said",
    [
        # a restart's blip: fewer failed connects than the rule asks for
        {"web": ["dial tcp orders:9000: connect: connection refused"] * (MIN_FAILED_CONNECTS - 1)},
        # the address is named, but the line says nothing failed
        {"web": ["connected to orders:9000"] * 10},
        # a host that is no component of the read (outside the cluster), and a component naming itself
        {
            "web": ["connect timed out: payments.example.com:443"] * 10,
            "orders": ["connection refused orders:9000"] * 10,
        },
    ],
)
def test_callers_that_do_not_keep_failing_to_reach_a_component_of_the_read_name_nothing(
    said: dict[str, list[str]],
) -> None:
    assert _cannot_connect(said) == []


def _unanswered(said: dict[str, list[str]], name: str = "callers_cannot_connect") -> list[KubeFinding]:
    cluster = Cluster(KubeObject.model_validate(o) for o in CLUSTERS[name])
    since = since_onset(ONSET)
    return unanswered_dependencies(cluster, analyze(cluster, since=since), said, since=since)


def test_a_component_its_callers_fail_to_get_anything_from_while_it_runs_quiet_is_a_service_that_routes_nowhere() -> (
    None
):
    """web writes what it missed, not an address (`failed to retrieve carts`), and cart's pods are
    ready and log no failure: the calls never reach cart, so cart's Service is what broke. The head of
    the phrase names it: `orders` after a preposition is where, not what."""
    line = "failed to get user carts during orders checkout: rpc error: code = Unavailable"
    (f,) = _unanswered({"web": ["GET /", line] * MIN_FAILED_CONNECTS, "cart": ["serving on :6379"], "orders": []})
    assert (f.component, f.component_type, f.object) == ("cart", "service", "Service/shop/cart")
    assert (f.sign, f.kind, f.affects) == ("unanswered_while_ready", "config_change", ["cart"])
    assert "web failed to get what cart serves (5 lines)" in f.why


@pytest.mark.parametrize(
    "said",
    [
        # the calls reached something slow: a delay, not a route to nowhere
        {"web": ["failed to retrieve cart: rpc error: code = DeadlineExceeded desc = context deadline exceeded"] * 10},
        # cart answers, and says it fails: its own fault, not its route
        {"web": ["failed to retrieve cart"] * 10, "cart": ["NullReferenceException in GetCart"]},
        # fewer lines than the rule asks for, and a phrase that names no component
        {"web": ["could not retrieve cart"] * (MIN_FAILED_CONNECTS - 1) + ["failed to load settings"] * 10},
    ],
)
def test_callers_that_miss_nothing_from_a_quiet_running_component_name_nothing(said: dict[str, list[str]]) -> None:
    assert _unanswered(said) == []


def test_a_component_its_own_pods_explain_is_not_named_for_what_its_callers_miss() -> None:
    cluster = Cluster(KubeObject.model_validate(o) for o in CLUSTERS["callers_cannot_connect_one_down"])
    since = since_onset(ONSET)
    found = analyze(cluster, since=since)
    assert unanswered_dependencies(cluster, found, {"web": ["failed to get mail"] * 10}, since=since) == []


@pytest.mark.parametrize("name", ["crash_loop", "recovered"])
def test_a_component_whose_own_pods_say_why_it_was_unreachable_is_left_to_them(name: str) -> None:
    """cart's pods crash-loop, or restarted after the onset and are ready again: callers that could
    not connect to it meanwhile add nothing; the pods' own state is the evidence."""
    cluster = Cluster(KubeObject.model_validate(o) for o in CLUSTERS[name])
    said = {"web": ["connection refused: cart:8080"] * 10}
    since = since_onset(ONSET)
    assert unreachable_dependencies(cluster, analyze(cluster, since=since), said, since=since) == []


def test_a_workload_its_probe_keeps_killing_is_named_though_it_looks_ready_between_the_kills() -> None:
    """cart has its one replica ready at the read, but the kubelet killed it for a failed liveness
    probe since onset, and its only pod restarted: the probe is what broke, and while it restarted
    cart served nobody. search's kill the day before is not this incident."""
    (f,) = findings("probe_kills_between_ready")
    assert (f.component, f.sign, f.kind, f.field) == ("cart", "probe_kills", "probe_failure", "events[Killing].message")
    assert f.affects == ["cart"] and "1/1 replicas ready" in f.why and "failed liveness probe" in f.why


FULL = "java.sql.SQLNonTransientConnectionException: Too many connections"


def _exhausted(said: dict[str, list[str]]) -> list[KubeFinding]:
    cluster = Cluster(KubeObject.model_validate(o) for o in CLUSTERS["pool_exhausted"])
    return exhausted_backends(cluster, analyze(cluster, since=since_onset(ONSET)), said)


def test_a_backend_that_refuses_its_crash_looping_callers_for_having_too_many_connections_is_named() -> None:
    """orders and cart exit because the server refused them for having too many connections, and db,
    ready, logs that refusal itself: db's connection limit is the broken thing, and the two crash
    loops are under its affects rather than findings of their own."""
    said = {
        "orders": ["HikariPool-1 - Exception during pool initialization.", FULL, "Application run failed"],
        "cart": [FULL, "Application run failed"],
        "db": ["[Warning] Too many connections"] * MIN_FAILED_CONNECTS,
        "search": ["query served"],
    }
    (f,) = _exhausted(said)
    assert (f.component, f.object, f.sign, f.kind) == (
        "db",
        "StatefulSet/shop/db",
        "refuses_connections",
        "db_pool_exhaustion",
    )
    assert f.affects == ["cart", "orders"] and "Too many connections" in f.why


@pytest.mark.parametrize(
    "said",
    [
        # one caller's pool running dry is that caller's own fault
        {"orders": [FULL], "cart": ["NullPointerException"], "db": ["[Warning] Too many connections"] * 10},
        # no ready component logs the refusal: nothing names the backend
        {"orders": [FULL], "cart": [FULL], "db": ["ready for connections"], "search": ["query served"]},
        # two ready components log it as much: which one is full is not said
        {"orders": [FULL], "cart": [FULL], "db": ["Too many connections"] * 6, "search": ["Too many connections"] * 6},
    ],
)
def test_crash_loops_stand_where_no_single_backend_says_it_refuses_them(said: dict[str, list[str]]) -> None:
    assert [(f.component, f.kind) for f in _exhausted(said)] == [("orders", "crash_loop"), ("cart", "crash_loop")]


def _access(path: str, status: int) -> str:
    return f'10.0.0.7 - - [04/May/2026:10:12:01 +0000] "GET {path} HTTP/1.1" {status} 153 "-" "curl/8.5"'


def _unrouted(said: dict[str, list[str]], name: str = "callers_cannot_connect") -> list[KubeFinding]:
    cluster = Cluster(KubeObject.model_validate(o) for o in CLUSTERS[name])
    return unrouted_paths(cluster, analyze(cluster, since=since_onset(ONSET)), said)


def test_a_component_whose_every_request_its_entry_answers_not_found_is_cut_off_by_its_route() -> None:
    """web's access log answers every request for /api/v1/cart 404 while its orders path answers 200:
    the route in front of cart sends its requests where nothing serves them."""
    lines = [_access("/api/v1/cart/items", 404), _access("/api/v1/orders/recent", 200)] * MIN_FAILED_CONNECTS
    (f,) = _unrouted({"web": lines})
    assert (f.component, f.component_type, f.object) == ("cart", "service", "Route/api/v1/cart")
    assert (f.sign, f.kind, f.affects) == ("route_not_found", "config_change", ["cart"])
    assert f"web answered the last {MIN_FAILED_CONNECTS} requests to /api/v1/cart (for cart) 404" in f.why


@pytest.mark.parametrize(
    "lines",
    [
        # the client gave up (499) or the backend failed (503): slow or down, not a route to nowhere
        [_access("/api/v1/cart", 499), _access("/api/v1/orders", 200)] * 10,
        [_access("/api/v1/cart", 503), _access("/api/v1/orders", 200)] * 10,
        # the last request for cart was served: the route works again
        [_access("/api/v1/cart", 404)] * 10 + [_access("/api/v1/cart", 200), _access("/api/v1/orders", 200)],
        # cart's path is not found since the orders path was last served: the entry stopped serving
        [_access("/api/v1/orders", 200)] + [_access("/api/v1/cart", 404)] * 10,
        # every path not found: the entry itself is broken, not one route
        [_access("/api/v1/cart", 404), _access("/api/v1/orders", 404)] * 10,
        # fewer requests than the rule asks for
        [_access("/api/v1/cart", 404)] * (MIN_FAILED_CONNECTS - 1) + [_access("/api/v1/orders", 200)],
        # a path that names no component of the read
        [_access("/api/v1/payments", 404), _access("/api/v1/orders", 200)] * 10,
    ],
)
def test_paths_that_are_served_slow_or_down_or_name_no_component_name_nothing(lines: list[str]) -> None:
    assert _unrouted({"web": lines}) == []


def test_a_component_whose_own_pods_are_down_is_left_to_them_though_its_path_is_not_found() -> None:
    lines = [_access("/api/v1/cart", 404), _access("/api/v1/web/health", 200)] * 10
    assert _unrouted({"web": lines}, "crash_loop") == []


READ_ONLY_LINE = (
    "SqlExceptionHelper : The MySQL server is running with the --read-only option so it cannot execute this statement"
)


def _read_only(said: dict[str, list[str]]) -> list[KubeFinding]:
    cluster = Cluster(KubeObject.model_validate(o) for o in CLUSTERS["probe_kills_between_ready"])
    since = since_onset(ONSET)
    return read_only_stores(cluster, analyze(cluster, since=since), said, since=since)


def test_the_one_store_that_restarted_while_its_callers_find_it_read_only_is_a_changed_setting() -> None:
    """search's writes are refused by a server running read-only, and cart is the one component every
    pod of which restarted since onset: cart was restarted into a read-only setting, which its
    probe's kills only accompany."""
    (f,) = _read_only({"search": [READ_ONLY_LINE] * MIN_FAILED_CONNECTS, "cart": ["ready for connections"]})
    assert (f.component, f.object, f.sign, f.kind) == (
        "cart",
        "Deployment/shop/cart",
        "restarted_read_only",
        "config_change",
    )
    assert f.affects == ["search"] and "--read-only option" in f.why


@pytest.mark.parametrize(
    "said",
    [
        # a blip: fewer refusals than a restart's own
        {"search": [READ_ONLY_LINE] * (MIN_FAILED_CONNECTS - 1)},
        # a read-only file system is a disk matter, not a store's setting
        {"search": ["open /data/x: read-only file system"] * 10},
        # the only component that restarted is the one saying it: it names no store
        {"cart": [READ_ONLY_LINE] * 10},
    ],
)
def test_the_probe_kills_stand_where_no_store_is_found_read_only(said: dict[str, list[str]]) -> None:
    assert [(f.component, f.kind) for f in _read_only(said)] == [("cart", "probe_failure")]
