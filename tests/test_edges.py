"""Call edges measured from both ends: a network delay on a component's links, told apart from
slow code inside it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from opsagent.analysis.edges import links_of, slow_paths
from opsagent.analysis.series import ScanGroup, partners, scan_stats
from opsagent.catalog import default_catalog
from opsagent.features import profiles_from
from opsagent.incident import open_incident
from opsagent.mechanisms import calls_in_findings
from opsagent.models import (
    Action,
    Alert,
    ChangeRecord,
    ChangesData,
    Incident,
    MetricsData,
    Observation,
    SeriesStats,
    SourceKind,
    TimeRange,
)


def _edge(caller: str, callee: str, side: str, ratio: float) -> SeriesStats:
    return SeriesStats(
        signal="client_latency_p99",
        component=callee,
        query=f'edge_latency_seconds{{caller="{caller}", callee="{callee}", side="{side}"}}',
        unit="s",
        series=1,
        baseline_mean=0.005,
        baseline_std=0.001,
        window_mean=0.005 * ratio,
        window_max=0.005 * ratio,
        peak_ratio=ratio,
        mean_ratio=ratio,
        z_score=10.0 if ratio > 1.2 else 0.0,
        change_point=None,
        direction="up" if ratio > 1.2 else "flat",
        scope="edge",
        caller=caller,
        side=side,  # type: ignore[arg-type]
    )


def _both(caller: str, callee: str, client: float, server: float) -> list[SeriesStats]:
    return [_edge(caller, callee, "client", client), _edge(caller, callee, "server", server)]


NETWORK = MetricsData(
    stats=[
        *_both("front", "cart", 50.0, 1.0),
        *_both("checkout", "cart", 40.0, 1.0),
        *_both("front", "checkout", 2.5, 2.5),  # checkout is slow itself: both ends agree
        *_both("front", "ads", 1.0, 1.0),
    ]
)


def test_calls_slow_only_between_the_ends_put_the_delay_on_the_links() -> None:
    assert {(e.caller, e.callee) for e in slow_paths(NETWORK)} == {("front", "cart"), ("checkout", "cart")}
    cart = links_of(NETWORK, "cart")
    assert cart.measured == 2 and cart.share == 1.0


def test_a_callee_whose_own_view_rose_as_much_is_not_slow_between_the_ends_even_when_judged_noise() -> None:
    # The callee's own view rose x2.1 but its noise kept the rise from counting as a shift: the
    # caller's x2.4 is still the callee's doing, not time lost on the wire.
    server = _edge("front", "cart", "server", 2.1).model_copy(update={"direction": "flat"})
    data = MetricsData(stats=[_edge("front", "cart", "client", 2.4), server])
    assert slow_paths(data) == []


def test_the_caller_of_one_slow_link_is_not_where_the_delay_sits() -> None:
    front = links_of(NETWORK, "front")
    assert front.measured == 3 and front.share < 0.5


def test_a_callee_slow_in_its_own_view_is_not_a_network_fault() -> None:
    assert all(e.callee != "checkout" for e in slow_paths(NETWORK))
    # its one slow link, its call to cart, slowed at cart's end (cart's calls from every caller did)
    assert links_of(NETWORK, "checkout").slow == []


ONSET = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _front_incident(alertname: str) -> Incident:
    """An alert on the front service at ONSET, half an hour of window before it."""
    return open_incident(
        Alert.model_validate({"labels": {"alertname": alertname, "service": "front"}, "startsAt": ONSET}),
        window=TimeRange(start=ONSET - timedelta(minutes=30), end=ONSET + timedelta(minutes=5)),
        baseline=TimeRange(start=ONSET - timedelta(minutes=30), end=ONSET - timedelta(minutes=10)),
    )


def _observed(data: MetricsData | ChangesData, tool: str, source: SourceKind) -> Observation:
    return Observation(id=f"{tool}-1", action=Action(tool=tool), source=source, data=data, text="", tokens=1)


def test_a_slow_link_whose_other_end_was_just_rolled_out_is_that_rollouts_doing() -> None:
    # checkout calls payment (its only caller): the link slowed between the ends. Without a change, the
    # delay is placed on payment's links; with checkout rolled out a minute before onset, new code at the
    # calling end (a call to the wrong endpoint, a new timeout) came first, and payment is not blamed.
    onset = ONSET
    incident = _front_incident("Slow")
    links = _observed(MetricsData(stats=_both("checkout", "payment", 25.0, 1.0)), "metrics.scan", SourceKind.metrics)
    rollout = ChangeRecord(
        id="rollout-checkout-v2",
        ts=onset - timedelta(minutes=1),
        service="checkout",
        kind="rollout",
        summary="rollout checkout v1->v2",
        from_version="v1",
        to_version="v2",
        minutes_before_onset=1.0,
    )
    changes = _observed(ChangesData(changes=[rollout]), "changes.list", SourceKind.changes)
    assert "net:path_slow" in profiles_from([links], incident)["payment"].features
    after_rollout = profiles_from([links, changes], incident)
    assert "net:path_slow" not in after_rollout["payment"].features
    # A rollout of payment itself leaves the link on payment.
    own = changes.model_copy(update={"data": ChangesData(changes=[rollout.model_copy(update={"service": "payment"})])})
    assert "net:path_slow" in profiles_from([links, own], incident)["payment"].features


def _success(caller: str, callee: str, side: str, level: float) -> SeriesStats:
    fell = level < 99.0
    return _edge(caller, callee, side, 1.0).model_copy(
        update={
            "signal": "availability",
            "query": f'edge_success_rate_percent{{caller="{caller}", callee="{callee}", side="{side}"}}',
            "unit": "percent",
            "baseline_mean": 100.0,
            "baseline_std": 0.5,
            "window_mean": level,
            "window_max": 100.0,
            "mean_ratio": level / 100.0,
            "peak_ratio": 1.0,
            "z_score": -20.0 if fell else 0.0,
            "direction": "down" if fell else "flat",
        }
    )


def test_calls_the_callee_served_that_failed_at_the_callers_end_are_not_the_callees_failure() -> None:
    # checkout's calls to three callees failed as checkout saw them, while each callee, measuring the
    # same calls, served every one (a client misconfigured by a config push, a wrong endpoint): the
    # callees did not fail. Where the callee's own view fails too, the failure is the callee's.
    incident = _front_incident("Errors")
    stats = [
        s
        for callee in ("cart", "currency", "shipping")
        for s in (_success("checkout", callee, "client", 90.0), _success("checkout", callee, "server", 100.0))
    ]
    stats += [_success("front", "ads", "client", 80.0), _success("front", "ads", "server", 80.0)]
    profiles = profiles_from([_observed(MetricsData(stats=stats), "metrics.scan", SourceKind.metrics)], incident)
    for callee in ("cart", "currency", "shipping"):
        assert "signal:availability:down" not in profiles[callee].features, callee
    assert "signal:availability:down" in profiles["ads"].features
    # the caller whose calls to all three failed at its end is where they fail; one such link could be
    # the wire to that one callee
    assert "net:path_failing" in profiles["checkout"].features and "net:path_failing" not in profiles["front"].features
    one = [s for s in stats if '"cart"' in s.query]
    alone = profiles_from([_observed(MetricsData(stats=one), "metrics.scan", SourceKind.metrics)], incident)
    assert "net:path_failing" not in alone["checkout"].features


def _minutely(values: list[float], *, end: datetime) -> list[tuple[float, float]]:
    """One sample a minute, the last at ``end``."""
    last = end.timestamp()
    return [(last - 60.0 * (len(values) - 1 - i), v) for i, v in enumerate(values)]


def _edge_groups(
    client: list[float], server: list[float], *, members: int = 1, metric: str = "edge_latency_seconds"
) -> list[ScanGroup]:
    end = ONSET + timedelta(minutes=4)
    return [
        ScanGroup("cart", metric, "front", [_minutely(client, end=end)] * members, side="client"),
        ScanGroup("cart", metric, "front", [_minutely(server, end=end)] * members, side="server"),
    ]


def _scanned(groups: list[ScanGroup]) -> MetricsData:
    incident = _front_incident("FrontLatency")
    other_end = partners(groups)
    catalog = default_catalog()
    return MetricsData(
        stats=[
            scan_stats(g, catalog=catalog, incident=incident, limit=None, partner=other_end.get(i))
            for i, g in enumerate(groups)
        ]
    )


#: Both ends' view of the calls, half an hour before onset and five minutes after: the callee's
#: time wanders widely (0.1-0.9 s, once 3 s), and the caller sees it plus a millisecond of wire.
_SERVED = [0.1, 0.5, 0.2, 0.9, 0.15, 0.4, 3.0, 0.3, 0.2, 0.6] * 3 + [0.3, 0.2, 0.5, 0.4, 0.2]
_WIRE_BEFORE = [0.001] * 30


def test_both_ends_paired_sample_by_sample_show_a_delay_on_the_wire_either_view_alone_hides() -> None:
    client = [s + w for s, w in zip(_SERVED, _WIRE_BEFORE + [0.3] * 5, strict=True)]
    data = _scanned(_edge_groups(client, _SERVED))
    caller_side = next(s for s in data.stats if s.side == "client")
    assert caller_side.direction == "flat"  # alone, 0.3 s more is within what the callee's time wanders
    assert caller_side.gap is not None
    assert caller_side.gap.gap_ms_baseline == 1.0 and caller_side.gap.gap_ms_window == 300.0
    assert [(e.caller, e.callee) for e in slow_paths(data)] == [("front", "cart")]
    found = calls_in_findings([_observed(data, "metrics.scan", SourceKind.metrics)])
    assert [(f.component, f.value, f.observation) for f in found] == [("cart", 299.0, "metrics.scan-1")]


def test_a_callee_slower_in_its_own_view_leaves_the_gap_between_the_ends_as_it_was() -> None:
    served = _SERVED[:30] + [v + 0.3 for v in _SERVED[30:]]
    client = [s + 0.001 for s in served]
    data = _scanned(_edge_groups(client, served))
    assert slow_paths(data) == []
    assert next(s for s in data.stats if s.side == "client").gap.shift_ms == 0.0  # type: ignore[union-attr]


def test_aggregates_of_several_series_or_a_measure_of_no_time_are_not_paired() -> None:
    client = [s + w for s, w in zip(_SERVED, _WIRE_BEFORE + [0.3] * 5, strict=True)]
    pods = _scanned(_edge_groups(client, _SERVED, members=2))  # pods or versions: whose calls is unknown
    counts = _scanned(_edge_groups(client, _SERVED, metric="edge_requests_total"))
    assert all(s.gap is None for s in pods.stats + counts.stats)


def test_a_caller_whose_calls_to_several_callees_all_slowed_on_its_side_holds_them_up_itself() -> None:
    # checkout's calls to email and currency slowed as checkout saw them, neither callee's view did:
    # the end the two slow edges share is checkout, so neither callee is where the delay sits.
    data = MetricsData(stats=[*_both("checkout", "email", 11.0, 1.0), *_both("checkout", "currency", 21.0, 1.0)])
    assert links_of(data, "email").slow == [] and links_of(data, "currency").slow == []
    assert len(links_of(data, "checkout").slow) == 2
    # one slow edge alone is either end's: both keep it
    one = MetricsData(stats=_both("checkout", "email", 11.0, 1.0))
    assert len(links_of(one, "email").slow) == len(links_of(one, "checkout").slow) == 1
