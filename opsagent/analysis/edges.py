"""Call edges measured from both ends: where the time between a caller and a callee is lost.

A call edge's latency seen by the caller (its client side) includes the network between the two;
seen by the callee (its server side), it does not. When the caller's view slows down and the
callee's does not, the time is lost between them. A network fault on one component's interface
slows every call to and from it, so the component most of whose measured links slowed this way is
where the delay sits. No I/O here.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from opsagent.analysis.gaps import gap_grew
from opsagent.models import MetricsData, SeriesStats
from opsagent.naming import bad_way, meaning_of

#: A call edge is slow on the path when the caller sees it at least this many times slower than
#: before while the callee's own view of the same calls moved by less than half as much.
PATH_SLOW_RATIO = 2.0
#: A component's links are slow when at least this share of its measured links is.
SLOW_LINKS_SHARE = 0.5


def metric_of(s: SeriesStats) -> str:
    """The metric name a series' query reads."""
    return s.query.split("{", 1)[0]


@dataclass(frozen=True)
class SlowEdge:
    caller: str
    callee: str
    client: SeriesStats
    server: SeriesStats


def measured_edges(data: MetricsData) -> dict[tuple[str, str, str], dict[str, SeriesStats]]:
    """(caller, callee, metric) -> {side: stats}, for edge series that say which end measured them."""
    sides: dict[tuple[str, str, str], dict[str, SeriesStats]] = defaultdict(dict)
    for s in data.stats:
        if s.scope == "edge" and s.caller and s.side:
            sides[(s.caller, s.component, metric_of(s))][s.side] = s
    return sides


def slow_paths(data: MetricsData) -> list[SlowEdge]:
    """Edges measured from both ends whose caller-side latency rose while the callee's did not."""
    out = []
    for (caller, callee, _), pair in sorted(measured_edges(data).items()):
        client, server = pair.get("client"), pair.get("server")
        if client is None or server is None:
            continue
        # The two views paired sample by sample: what they share cancels out, so the time lost between
        # them shows even where either view alone is too noisy to judge.
        if client.gap is not None and gap_grew(client.gap):
            out.append(SlowEdge(caller, callee, client, server))
            continue
        if client.direction != "up" or client.mean_ratio is None:
            continue
        # How far the callee's own view moved, judged significant or not: a rise as large at the callee
        # is the callee's, whatever its noise made of it.
        server_ratio = max(server.mean_ratio or 1.0, 1.0)
        if client.mean_ratio >= PATH_SLOW_RATIO and client.mean_ratio >= 2 * server_ratio:
            out.append(SlowEdge(caller, callee, client, server))
    return out


def failing_between(data: MetricsData) -> list[SlowEdge]:
    """Edges measured from both ends whose calls the caller saw fail while the callee, measuring the
    same calls, saw none fail: the failure is in the caller's client or on the wire, not the callee's."""
    out = []
    for (caller, callee, metric), pair in sorted(measured_edges(data).items()):
        client, server = pair.get("client"), pair.get("server")
        way = bad_way(metric)
        if client is None or server is None or meaning_of(metric) != "errors" or way == "any":
            continue
        if client.direction == way and server.direction == "flat":
            out.append(SlowEdge(caller, callee, client, server))
    return out


@dataclass(frozen=True)
class Links:
    """A component's call edges measured from both ends, and those slow between the ends."""

    component: str
    measured: int
    slow: list[SlowEdge]

    @property
    def share(self) -> float:
        return len(self.slow) / self.measured if self.measured else 0.0


def links_of(data: MetricsData, component: str) -> Links:
    both = {
        (caller, callee)
        for (caller, callee, _), pair in measured_edges(data).items()
        if "client" in pair and "server" in pair and component in (caller, callee)
    }
    every = slow_paths(data)
    # An edge slow between its ends is slow at one of them: at the end it shares with more such edges
    # (a caller whose calls to several callees all slowed on its side holds them up itself, as a callee
    # whose calls from several callers all slowed has the delay on its interface); a tie leaves both.
    ends = Counter(end for e in every for end in (e.caller, e.callee))
    slow = [
        e
        for e in every
        if component in (e.caller, e.callee)
        and ends[component] >= ends[e.callee if e.caller == component else e.caller]
    ]
    return Links(component, len(both), slow)
