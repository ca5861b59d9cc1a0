"""Call edges measured from both ends: a network delay on a component's links, told apart from
slow code inside it."""

from __future__ import annotations

from opsagent.analysis.edges import links_of, slow_paths
from opsagent.models import MetricsData, SeriesStats


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


def test_the_caller_of_one_slow_link_is_not_where_the_delay_sits() -> None:
    front = links_of(NETWORK, "front")
    assert front.measured == 3 and front.share < 0.5


def test_a_callee_slow_in_its_own_view_is_not_a_network_fault() -> None:
    assert links_of(NETWORK, "checkout").slow == [e for e in slow_paths(NETWORK) if "checkout" in (e.caller, e.callee)]
    assert all(e.callee != "checkout" for e in slow_paths(NETWORK))
