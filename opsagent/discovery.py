"""Signal discovery: an environment's metric names mapped to catalog signals by convention.

A user whose metric names the catalog has never seen still gets playbook checks: a latency
percentile in seconds or milliseconds is ``latency_p99`` (the highest percentile there is, served
rather than waited for), a CPU usage in percent is ``cpu_usage`` with a ceiling of 100, a success
rate is ``availability``, a call edge's latency seen by its caller is ``client_latency_p99``, and so
on. The conventions are Prometheus' (the base unit last, ``_total`` for counters) and the common
exporters' words. An explicit signal (configuration, a recording's ``signals:``) always wins, and a
default whose metric the environment has keeps its place; discovery only fills the gaps.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from opsagent.analysis.series import CLIENT_SIDES, NODE_PREFIXES, SERVER_SIDES, SIDE_LABELS
from opsagent.fixtures import MetricSeries, SignalDef
from opsagent.naming import unit_of

#: Labels that name the component a series belongs to (a pod rolls up to its service).
_COMPONENT_LABELS = ("service", "app", "application", "service_name", "job", "component", "container", "pod")


@dataclass
class MetricShape:
    """What a metric looks like across the series that carry it: its labels and the values of the
    labels that say which end of a call measured it."""

    name: str
    labels: set[str] = field(default_factory=set)
    sides: dict[str, set[str]] = field(default_factory=dict)
    components: set[str] = field(default_factory=set)

    @property
    def edge(self) -> bool:
        return "callee" in self.labels

    def tokens(self) -> set[str]:
        return set(self.name.lower().split("_"))


def shapes_of(series: Iterable[MetricSeries]) -> list[MetricShape]:
    found: dict[str, MetricShape] = {}
    for s in series:
        shape = found.setdefault(s.name, MetricShape(s.name))
        shape.labels.update(k for k in s.labels if k != "__name__")
        for label in SIDE_LABELS:
            if label in s.labels:
                shape.sides.setdefault(label, set()).add(s.labels[label].lower())
        component = next((s.labels[k] for k in _COMPONENT_LABELS if s.labels.get(k)), None)
        if component:
            shape.components.add(component)
    return [found[n] for n in sorted(found)]


_PERCENTILE = re.compile(r"^p(\d+(?:\.\d+)?)$")
#: Statistics of a latency, best first: the tail is what users feel and alerts watch.
_STAT_RANK = {"max": 0.5, "avg": 0.3, "average": 0.3, "mean": 0.3, "median": 0.2}


def _latency_rank(shape: MetricShape) -> float:
    """How well a latency metric stands for p99: its percentile (p99 best), else its statistic."""
    for t in shape.tokens():
        m = _PERCENTILE.match(t)
        if m:
            return float(m.group(1)) / 100
    return max((_STAT_RANK.get(t, 0.0) for t in shape.tokens()), default=0.0)


def _has(shape: MetricShape, *words: str) -> bool:
    tokens = shape.tokens()
    return any(w in tokens for w in words)


def _is_latency(shape: MetricShape) -> bool:
    return _has(shape, "latency", "duration", "response") and unit_of(shape.name) in ("s", "ms")


def _side_value(shape: MetricShape, wanted: frozenset[str]) -> tuple[str, str] | None:
    for label, values in sorted(shape.sides.items()):
        chosen = sorted(values & wanted)
        if chosen:
            return label, chosen[0]
    return None


def _service_query(shape: MetricShape) -> str:
    return f'{shape.name}{{service="$service"}}'


def _edge_query(shape: MetricShape, sides: frozenset[str]) -> str | None:
    side = _side_value(shape, sides)
    if shape.sides and side is None:
        return None
    suffix = f', {side[0]}="{side[1]}"' if side else ""
    return f'{shape.name}{{callee="$service"{suffix}}}'


@dataclass(frozen=True)
class Rule:
    """How one signal is found: which metrics qualify, which is best, and how it is read."""

    signal: str
    qualifies: Callable[[MetricShape], bool]
    rank: Callable[[MetricShape], tuple[float, ...]]
    define: Callable[[MetricShape], SignalDef | None]


def _percent_limit(shape: MetricShape) -> str | None:
    unit = unit_of(shape.name)
    return "vector(100)" if unit == "percent" else "vector(1)" if unit == "ratio" else None


def _own(shape: MetricShape) -> bool:
    """A component's own figure: not a node's, not a call edge's, not its view of its calls."""
    return not shape.name.startswith(NODE_PREFIXES) and not shape.edge and not _has(shape, "client", "outbound")


RULES: tuple[Rule, ...] = (
    Rule(
        "latency_p99",
        lambda m: _own(m) and _is_latency(m),
        # most components covered, then the highest percentile, then time served over time waited
        lambda m: (len(m.components), _latency_rank(m), 1.0 if _has(m, "server") else 0.0),
        lambda m: SignalDef(query=_service_query(m), unit=unit_of(m.name), direction="up", agg="max"),
    ),
    Rule(
        "client_latency_p99",
        lambda m: m.edge and _is_latency(m),
        lambda m: (_latency_rank(m), len(m.components)),
        lambda m: (
            SignalDef(query=q, unit=unit_of(m.name), direction="up", agg="max", scope="edge")
            if (q := _edge_query(m, CLIENT_SIDES))
            else None
        ),
    ),
    Rule(
        "availability",
        lambda m: not m.name.startswith(NODE_PREFIXES) and _has(m, "success", "availability", "available"),
        # a service's own figure before an edge's, then coverage
        lambda m: (0.0 if m.edge else 1.0, len(m.components)),
        lambda m: (
            SignalDef(query=q, unit=unit_of(m.name), direction="down", agg="mean")
            if (q := (_edge_query(m, SERVER_SIDES) if m.edge else _service_query(m)))
            else None
        ),
    ),
    Rule(
        "error_ratio",
        lambda m: _own(m) and _has(m, "error", "errors", "failure", "failures") and _has(m, "ratio", "rate", "percent"),
        lambda m: (len(m.components),),
        lambda m: SignalDef(query=_service_query(m), unit=unit_of(m.name), direction="up", agg="max"),
    ),
    Rule(
        "cpu_usage",
        lambda m: _own(m) and _has(m, "cpu") and not _has(m, "throttled", "throttling", "limit", "request", "requests"),
        # a share of the limit reads against a ceiling; then coverage
        lambda m: (1.0 if unit_of(m.name) in ("percent", "ratio") else 0.0, len(m.components)),
        lambda m: SignalDef(
            query=_service_query(m), unit=unit_of(m.name), direction="up", agg="max", limit=_percent_limit(m)
        ),
    ),
    Rule(
        "cpu_throttling",
        lambda m: _own(m) and _has(m, "cpu") and _has(m, "throttled", "throttling"),
        lambda m: (len(m.components),),
        lambda m: SignalDef(query=_service_query(m), unit=unit_of(m.name), direction="up", agg="max"),
    ),
    Rule(
        "memory_usage",
        lambda m: _own(m) and _has(m, "memory", "mem", "rss") and not _has(m, "limit", "request", "requests"),
        lambda m: (1.0 if unit_of(m.name) in ("percent", "ratio") else 0.0, len(m.components)),
        lambda m: SignalDef(
            query=_service_query(m), unit=unit_of(m.name), direction="up", agg="max", limit=_percent_limit(m)
        ),
    ),
    Rule(
        "request_rate",
        lambda m: (
            _own(m)
            and _has(m, "requests", "request", "ops", "qps", "rps", "throughput", "workload")
            and not _has(m, "latency", "duration", "error", "errors", "bytes", "cpu", "memory")
        ),
        lambda m: (len(m.components),),
        lambda m: SignalDef(query=_service_query(m), direction="any", agg="sum"),
    ),
    Rule(
        "restarts",
        lambda m: _own(m) and _has(m, "restart", "restarts"),
        lambda m: (len(m.components),),
        lambda m: SignalDef(query=_service_query(m), unit="count", direction="up", agg="sum"),
    ),
    Rule(
        "gc_pause",
        lambda m: _own(m) and _has(m, "gc") and _has(m, "pause", "duration"),
        lambda m: (_latency_rank(m), len(m.components)),
        lambda m: SignalDef(query=_service_query(m), unit=unit_of(m.name), direction="up", agg="max"),
    ),
)


def discover(series: Iterable[MetricSeries]) -> dict[str, SignalDef]:
    """The catalog signals these series can stand for, each with the best qualifying metric."""
    shapes = shapes_of(series)
    found: dict[str, SignalDef] = {}
    for rule in RULES:
        candidates = sorted(
            (m for m in shapes if rule.qualifies(m)), key=lambda m: (rule.rank(m), m.name), reverse=True
        )
        for shape in candidates:
            signal = rule.define(shape)
            if signal is not None:
                found[rule.signal] = signal
                break
    return found


def metric_names(series: Iterable[MetricSeries]) -> set[str]:
    return {s.name for s in series}
