"""Trace analysis for an incident: each span's own time, call edges, per-service shifts.

Pure functions over :class:`~opsagent.fixtures.Span` records, shared by the replay and live trace
sources. A span's self time is its duration less the union of its children's intervals, so a
service that only waits on a slow callee shows no self-time shift. No I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from statistics import median

import numpy as np

from opsagent.analysis.columns import SpanColumns
from opsagent.fixtures import Edge, Span, unix
from opsagent.models import Incident, OperationStats, ServiceSpanStats, TracesData
from opsagent.stats import safe_ratio

#: Fewer spans than this on either side of onset, and a service's time shift is not scored.
MIN_SPANS = 5


@dataclass(frozen=True, slots=True)
class SpanTime:
    """One span's own time (total minus the union of its children) and whether its error began there."""

    service: str
    operation: str
    start: float
    self_ms: float
    total_ms: float
    error: bool
    origin_error: bool
    children: int


@dataclass(frozen=True, slots=True)
class SpanTimes:
    """Every span's own time, as columns: one array a field, the i-th entry of each about span i.
    A million spans are eight arrays here, not a million objects; iterating yields :class:`SpanTime`."""

    services: tuple[str, ...]  # the distinct service names; ``service[i]`` indexes them
    operations: tuple[str, ...]
    service: np.ndarray  # int64 codes into ``services``
    operation: np.ndarray  # int64 codes into ``operations``
    start: np.ndarray  # unix seconds
    self_ms: np.ndarray
    total_ms: np.ndarray
    error: np.ndarray  # bool
    origin_error: np.ndarray  # bool
    children: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.start)

    def __iter__(self) -> Iterator[SpanTime]:
        columns = (
            self.service.tolist(),
            self.operation.tolist(),
            self.start.tolist(),
            self.self_ms.tolist(),
            self.total_ms.tolist(),
            self.error.tolist(),
            self.origin_error.tolist(),
            self.children.tolist(),
        )
        for svc, op, st, sm, tm, e, o, c in zip(*columns, strict=True):
            yield SpanTime(self.services[svc], self.operations[op], st, sm, tm, e, o, c)


def span_times(spans: Iterable[Span] | SpanColumns) -> SpanTimes:
    """Each span's own time. ``spans`` is read once, into columns (:class:`SpanColumns`, or the
    columns already read).

    The arithmetic runs over arrays (numpy), element by element in the same IEEE operations as one
    span at a time, so the results are the same to the last bit; only a span with two or more
    children walks their union in Python."""
    columns = spans if isinstance(spans, SpanColumns) else SpanColumns.read(spans)
    n = len(columns)
    start, duration, error = columns.start, columns.duration_us, columns.error
    end = start + duration / 1e6
    own_code, parent_code = columns.own, columns.parent
    child_idx = np.flatnonzero(parent_code >= 0)
    # the children of each code, in span order: children[first[c] : first[c] + per_code[c]]
    children = child_idx[np.argsort(parent_code[child_idx], kind="stable")]
    per_code = np.bincount(parent_code[child_idx], minlength=columns.keys)
    first = np.concatenate(([0], np.cumsum(per_code)[:-1]))
    count = per_code[own_code]
    failing = np.zeros(columns.keys, dtype=bool)
    failing[parent_code[child_idx[error[child_idx]]]] = True
    covered = np.zeros(n)
    # one child: its interval clipped to the parent, as _union_length computes it
    single = np.flatnonzero(count == 1)
    if single.size:
        child = children[first[own_code[single]]]
        lo = np.where(start[single] > start[child], start[single], start[child])
        hi = np.where(end[single] < end[child], end[single], end[child])
        covered[single] = np.where(hi <= lo, 0.0, hi - lo)
    for i in np.flatnonzero(count > 1).tolist():
        at = first[own_code[i]]
        intervals = [(start[c], end[c]) for c in children[at : at + count[i]]]
        covered[i] = _union_length(intervals, start[i], end[i])
    left = end - start - covered
    return SpanTimes(
        services=columns.services,
        operations=columns.operations,
        service=columns.service,
        operation=columns.operation,
        start=start,
        self_ms=np.where(left < 0.0, 0.0, left) * 1000,
        total_ms=duration / 1000,
        error=error,
        origin_error=error & ~failing[own_code],
        children=count,
    )


def trace_edges(spans: Iterable[Span] | SpanColumns) -> list[Edge]:
    """Caller -> callee service pairs, from parent/child spans of different services (a parent id
    that several spans of its trace have is its last one's)."""
    columns = spans if isinstance(spans, SpanColumns) else SpanColumns.read(spans)
    owner = columns.last_of(columns.own, columns.keys)
    called = np.flatnonzero(columns.parent >= 0)
    caller = owner[columns.parent[called]]
    known = caller >= 0
    caller, callee = columns.service[caller[known]], columns.service[called[known]]
    n_services = max(len(columns.services), 1)
    names = columns.services
    pairs = {(names[p // n_services], names[p % n_services]) for p in np.unique(caller * n_services + callee).tolist()}
    return [Edge(caller=a, callee=b, source="traces") for a, b in sorted(pairs) if a != b]


def neighbours(edges: Sequence[Edge], service: str) -> tuple[list[str], list[str]]:
    """The callers and the callees of a service."""
    callers = sorted({e.caller for e in edges if e.callee == service})
    callees = sorted({e.callee for e in edges if e.caller == service})
    return callers, callees


def trace_summary(spans: SpanTimes, edges: Sequence[Edge], *, incident: Incident, service: str | None) -> TracesData:
    """Per-service self-time shift, slowest operations, error spans, blocked parents."""
    b0, b1 = unix(incident.baseline.start), unix(incident.baseline.end)
    w0, w1 = unix(incident.onset), unix(incident.window.end)
    callers, callees = neighbours(edges, service) if service else ([], [])
    start = spans.start
    in_base = (b0 <= start) & (start < b1)
    in_win = ~in_base & (w0 <= start) & (start < w1)
    if service:
        wanted = {service, *callers, *callees}
        mine = np.isin(spans.service, [i for i, name in enumerate(spans.services) if name in wanted])
        in_base &= mine
        in_win &= mine
    base, win = _by_code(spans.service, in_base), _by_code(spans.service, in_win)
    services = []
    for code in sorted(base.keys() | win.keys(), key=spans.services.__getitem__):
        bi, wi = base.get(code, _NONE), win.get(code, _NONE)
        self_bs, self_ws = spans.self_ms[bi].tolist(), spans.self_ms[wi].tolist()
        total_bs, total_ws = spans.total_ms[bi].tolist(), spans.total_ms[wi].tolist()
        self_b = _p50(self_bs)
        self_w = _p50(self_ws)
        services.append(
            ServiceSpanStats(
                service=spans.services[code],
                spans_baseline=len(bi),
                spans_window=len(wi),
                self_ms_baseline=self_b,
                self_ms_window=self_w,
                # A handful of sampled spans says nothing about a shift.
                self_shift=safe_ratio(self_w, max(self_b, 0.05))
                if self_b is not None and len(bi) >= MIN_SPANS and len(wi) >= MIN_SPANS
                else None,
                total_ms_baseline=_p50(total_bs),
                total_ms_window=_p50(total_ws),
                tail_total_shift=_tail_shift(total_bs, total_ws),
                tail_self_shift=_tail_shift(self_bs, self_ws),
                errors_baseline=int(np.count_nonzero(spans.error[bi])),
                errors_window=int(np.count_nonzero(spans.error[wi])),
                origin_errors_baseline=int(np.count_nonzero(spans.origin_error[bi])),
                origin_errors_window=int(np.count_nonzero(spans.origin_error[wi])),
                fanout_shift=_fanout_shift(spans.children[bi].tolist(), spans.children[wi].tolist()),
            )
        )
    n_ops = max(len(spans.operations), 1)
    slowest = sorted(
        (
            OperationStats(
                service=spans.services[key // n_ops],
                operation=spans.operations[key % n_ops],
                p95_ms=round(_pct(spans.total_ms[group].tolist(), 0.95), 2),
                self_p95_ms=round(_pct(spans.self_ms[group].tolist(), 0.95), 2),
                count=len(group),
            )
            for key, group in _by_code(spans.service * n_ops + spans.operation, in_win).items()
        ),
        key=lambda o: (-o.self_p95_ms, o.service, o.operation),
    )[:5]
    # Waiting on callees: the slow tail got slower while the service's own time did not, and
    # it makes no more calls than before (one that fans out more is waiting on itself).
    blocked = [
        s.service
        for s in services
        if (s.tail_total_shift or 0) >= 1.5
        and (s.tail_self_shift is None or s.tail_self_shift < 1.3)
        and (s.self_shift is None or s.self_shift < 1.3)
        and (s.fanout_shift is None or s.fanout_shift < 1.3)
    ]
    return TracesData(
        services=services,
        slowest_operations=slowest,
        error_spans={s.service: s.origin_errors_window for s in services if s.origin_errors_window},
        blocked_parents=blocked,
        callers=callers,
        callees=callees,
    )


_NONE = np.zeros(0, dtype=np.int64)


def _by_code(codes: np.ndarray, where: np.ndarray) -> dict[int, np.ndarray]:
    """The indices of the selected spans, grouped by code, each group in span order."""
    picked = np.flatnonzero(where)
    if not picked.size:
        return {}
    ordered = picked[np.argsort(codes[picked], kind="stable")]
    keys, first = np.unique(codes[ordered], return_index=True)
    return dict(zip(keys.tolist(), np.split(ordered, first[1:]), strict=True))


def _p50(values: list[float]) -> float | None:
    return round(median(values), 3) if values else None


def _fanout_shift(base: list[int], window: list[int]) -> float | None:
    """Child calls per span that has any, window against baseline."""
    b = [c for c in base if c]
    w = [c for c in window if c]
    if len(b) < MIN_SPANS or len(w) < MIN_SPANS:
        return None
    return safe_ratio(sum(w) / len(w), sum(b) / len(b))


def _tail_shift(base: list[float], window: list[float], q: float = 0.9) -> float | None:
    if len(base) < MIN_SPANS or len(window) < MIN_SPANS:
        return None
    return safe_ratio(_pct(window, q), max(_pct(base, q), 0.05))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _union_length(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of child intervals clipped to the parent: parallel calls count once."""
    total, cur_start, cur_end = 0.0, None, None
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in intervals):
        if b <= a:
            continue
        if cur_end is None or a > cur_end:
            if cur_end is not None and cur_start is not None:
                total += cur_end - cur_start
            cur_start, cur_end = a, b
        else:
            cur_end = max(cur_end, b)
    if cur_end is not None and cur_start is not None:
        total += cur_end - cur_start
    return total
