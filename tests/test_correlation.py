"""Alert correlation: connected alerts close in time are one storm, an unconnected one stays apart,
alerts that name nothing or fired hours apart are never joined, and a flood of alerts costs a
bounded amount of state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from opsagent.correlation import Correlator, Topology, correlate, explain, storm_of
from opsagent.fixtures import Edge
from opsagent.incident import joined_alert, open_incident
from opsagent.models import Alert, Cost, Report, Suspect, Symptom

T0 = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
#: web -> api -> orders -> db; api -> catalog -> db; reports -> warehouse (an island of its own)
EDGES = [
    Edge(caller="web", callee="api"),
    Edge(caller="api", callee="orders"),
    Edge(caller="api", callee="catalog"),
    Edge(caller="orders", callee="db"),
    Edge(caller="catalog", callee="db"),
    Edge(caller="reports", callee="warehouse"),
]


def alert(name: str, service: str | None = None, *, at: timedelta = timedelta(0), **labels: str) -> Alert:
    named = {"alertname": name, **({"service": service} if service else {}), **labels}
    return Alert.model_validate(
        {"labels": named, "startsAt": T0 + at, "fingerprint": f"fp-{name}-{service}-{at.total_seconds():g}"}
    )


def keys(storms: list) -> list[list[str]]:
    return [[m.alertname for m in s.members] for s in storms]


def test_alerts_on_services_the_call_graph_connects_are_one_storm_and_an_island_stays_apart() -> None:
    storms = correlate(
        [
            alert("WebLatency", "web"),
            alert("OrdersErrors", "orders", at=timedelta(minutes=2)),
            alert("DbSaturation", "db", at=timedelta(minutes=3)),
            alert("WarehouseDisk", "warehouse", at=timedelta(minutes=1)),
        ],
        EDGES,
    )
    assert keys(storms) == [["WebLatency", "OrdersErrors", "DbSaturation"], ["WarehouseDisk"]]
    reasons = [m.reason for m in storms[0].members]
    assert reasons == ["", "web calls orders", "web calls db"]


def test_two_callers_of_one_dependency_join_and_hops_bound_how_far_a_call_graph_connects() -> None:
    together = correlate(
        [alert("OrdersSlow", "orders"), alert("CatalogSlow", "catalog", at=timedelta(seconds=30))], EDGES
    )
    assert keys(together) == [["OrdersSlow", "CatalogSlow"]]
    assert together[0].members[1].reason == "catalog and orders both depend on db"
    near = Topology(EDGES, hops=1)
    assert near.link("web", "api") == "web calls api"
    assert near.link("web", "db") is None  # three calls away


def test_alerts_on_one_node_join_without_any_topology() -> None:
    storms = correlate(
        [alert("DiskFull", "backup", node="worker-3"), alert("PodEvicted", "cache", node="worker-3")], []
    )
    assert keys(storms) == [["DiskFull", "PodEvicted"]]
    assert storms[0].members[1].reason == "same node worker-3"


def test_an_alert_that_names_no_service_and_no_node_stays_its_own_incident() -> None:
    later = timedelta(seconds=20)
    storms = correlate([alert("WebLatency", "web"), alert("Watchdog", at=later), alert("Heartbeat", at=later)], EDGES)
    assert keys(storms) == [["WebLatency"], ["Heartbeat"], ["Watchdog"]]
    assert joined_alert(alert("Watchdog")).services == ()


def test_connected_alerts_whose_clocks_are_hours_apart_are_not_joined_and_do_not_stretch_the_storm() -> None:
    lead = alert("WebLatency", "web")
    skewed = alert("OrdersErrors", "orders", at=timedelta(hours=5))
    late = alert("DbSaturation", "db", at=timedelta(minutes=9))
    storms = correlate([lead, skewed, late], EDGES)
    assert keys(storms) == [["WebLatency", "DbSaturation"], ["OrdersErrors"]]
    # an alert from the past, as a sender with a slow clock stamps it, is as far as one from the future
    assert keys(correlate([lead, alert("OrdersErrors", "orders", at=-timedelta(hours=5))], EDGES)) == [
        ["OrdersErrors"],
        ["WebLatency"],
    ]
    assert storm_of(lead, [skewed, late], EDGES) == [joined_alert(late, "web calls db")]


def test_the_storms_do_not_depend_on_the_order_the_alerts_are_given_in() -> None:
    alerts = [
        alert("WebLatency", "web"),
        alert("OrdersErrors", "orders", at=timedelta(minutes=2)),
        alert("WarehouseDisk", "warehouse", at=timedelta(minutes=1)),
        alert("ReportsDown", "reports", at=timedelta(minutes=4)),
    ]
    assert keys(correlate(alerts, EDGES)) == keys(correlate(list(reversed(alerts)), EDGES))


def test_thousands_of_alerts_in_a_minute_make_one_storm_and_the_state_stays_capped() -> None:
    correlator = Correlator(Topology(EDGES), max_storms=16, max_members=32)
    services = ["web", "api", "orders", "catalog", "db"]
    opened = 0
    for i in range(4000):
        a = alert(f"Pod{i}", services[i % len(services)], at=timedelta(seconds=i * 60 / 4000), pod=f"p{i}")
        opened += correlator.place(a, key=f"k{i}").opened
    assert opened == 1
    (storm,) = correlator.storms
    assert storm.count == 4000 and len(storm.members) == 32
    assert sorted(storm.services) == sorted(services)
    stored, members, fingerprints = correlator.size()
    assert (stored, members) == (1, 32) and fingerprints <= 16 * 32


def test_thousands_of_unconnected_alerts_keep_at_most_max_storms() -> None:
    correlator = Correlator(Topology([]), max_storms=50, max_members=8)
    for i in range(3000):
        correlator.place(alert(f"Lonely{i}", f"svc-{i}", at=timedelta(seconds=i / 50)), key=f"k{i}")
    stored, members, fingerprints = correlator.size()
    assert stored == 50 and members == 50 and fingerprints == 50
    assert [s.key for s in correlator.storms][-1] == "k2999"  # the most recent are the ones kept


def test_a_known_fingerprint_returns_to_its_storm_and_forgetting_a_storm_frees_its_alerts() -> None:
    correlator = Correlator(Topology(EDGES))
    first = correlator.place(alert("WebLatency", "web"), key="g1")
    again = correlator.place(alert("WebLatency", "web"), key="g2")
    assert first.opened and not again.opened and again.storm is first.storm and first.storm.count == 1
    correlator.forget("g1")
    assert correlator.size() == (0, 0, 0)
    assert correlator.place(alert("WebLatency", "web"), key="g3").opened


def test_the_objective_of_a_storm_names_every_alerting_service_and_lists_its_alerts() -> None:
    lead = alert("WebLatency", "web")
    joined = [joined_alert(alert("DbSaturation", "db", at=timedelta(minutes=3)), "web calls db")]
    incident = open_incident(lead, joined=joined)
    assert incident.services == ("web", "db")
    assert [a.alertname for a in incident.alerts] == ["WebLatency", "DbSaturation"]
    assert incident.title.endswith("(and 1 more alert)")
    assert open_incident(lead).alerts == ()


def _report(lead: Alert, joined: list, root: str | None) -> Report:
    incident = open_incident(lead, joined=joined)
    suspect = Suspect(component=root, kind="slow_query", score=1.0, status="confirmed", why="") if root else None
    return Report(
        incident=incident,
        strategy="hybrid",
        status="confirmed" if root else "inconclusive",
        root_cause=suspect,
        statement="",
        confidence=0.9,
        evidence=[],
        timeline=[],
        results=[],
        suspects=[suspect] if suspect else [],
        lessons=[],
        cost=Cost(steps=0, tool_calls=0, cache_hits=0, tokens=0, wall_ms=0.0),
    )


def test_the_report_says_which_cause_explains_each_joined_alert_or_that_none_does() -> None:
    lead = alert("WebLatency", "web")
    joined = [
        joined_alert(alert("DbSaturation", "db", at=timedelta(minutes=3)), "web calls db"),
        joined_alert(alert("NightlyReports", "reports", at=timedelta(minutes=4), node="n1"), "same node n1"),
    ]
    found = explain(_report(lead, joined, "db"), EDGES)
    assert [(x.alert.alertname, x.cause) for x in found] == [
        ("WebLatency", "db/slow_query"),
        ("DbSaturation", "db/slow_query"),
        ("NightlyReports", None),
    ]
    assert found[0].how == "the root cause: web calls db"
    assert found[1].how == "the root cause: db is the alerting service"
    assert found[2].how == "not explained: no proven cause is reached from reports"
    unproven = explain(_report(lead, joined, None), EDGES)
    assert {x.how for x in unproven} == {"not explained: no cause was proven"}
    assert explain(_report(lead, [], "db"), EDGES) == []
    assert _report(lead, [], "db").incident.symptom is Symptom.latency


def test_an_alert_with_nothing_to_correlate_by_joins_its_groups_storm_until_the_window_has_passed() -> None:
    correlator = Correlator(Topology(EDGES))
    first = correlator.join(alert("DiskFull"), key="team-blue", reason="same alert group")
    second = correlator.join(alert("MemoryHigh", at=timedelta(minutes=2)), key="team-blue", reason="same alert group")
    assert first.opened and not second.opened and second.storm is first.storm
    assert [m.reason for m in first.storm.members] == ["", "same alert group"]
    later = correlator.join(alert("DiskFull", at=timedelta(hours=3)), key="team-blue", reason="same alert group")
    assert later.opened and later.storm is not first.storm and correlator.held("team-blue") is later.storm


def test_a_correlator_seeded_with_stored_storms_places_as_one_that_held_them_and_lists_its_changes() -> None:
    holder = Correlator(Topology(EDGES))
    opened = holder.place(alert("WebLatency", "web"), key="g1").storm
    holder.place(alert("Reports", "reports"), key="g2")
    assert list(holder.changes.storms) == ["g1", "g2"] and set(holder.changes.fingerprints) == {
        "fp-WebLatency-web-0",
        "fp-Reports-reports-0",
    }
    seeded = Correlator(Topology(EDGES))
    seeded.remember(opened, [("fp-WebLatency-web-0", T0)])
    assert not seeded.changes.storms  # remembering changes nothing
    joined = seeded.place(alert("DbSaturation", "db", at=timedelta(minutes=1)), key="g3")
    again = seeded.place(alert("WebLatency", "web"), key="g4")
    assert joined.storm is opened and again.storm is opened and again.reason == "already part of it"
    assert list(seeded.changes.storms) == ["g1"] and list(seeded.changes.fingerprints) == ["fp-DbSaturation-db-60"]
    seeded.forget("g1")
    assert seeded.changes.forgotten == {"g1"} and not seeded.changes.storms and not seeded.changes.fingerprints


def test_alerts_that_name_different_clusters_or_environments_are_never_one_storm() -> None:
    storms = correlate(
        [
            alert("WebLatency", "web", cluster="eu-1"),
            alert("DbSaturation", "db", at=timedelta(minutes=1), cluster="eu-1"),
            alert("WebLatency", "web", at=timedelta(minutes=2), cluster="us-2"),
            alert("ApiErrors", "api", at=timedelta(minutes=3)),  # names no cluster: the first storm takes it
            alert("OrdersSlow", "orders", at=timedelta(minutes=4), cluster="eu-1", env="staging"),
            alert("CatalogSlow", "catalog", at=timedelta(minutes=5), cluster="eu-1", env="prod"),
        ],
        EDGES,
    )
    assert keys(storms) == [
        ["WebLatency", "DbSaturation", "ApiErrors", "OrdersSlow"],
        ["WebLatency"],
        ["CatalogSlow"],
    ]
    assert storms[0].scope == {"cluster": "eu-1", "env": "staging"}
