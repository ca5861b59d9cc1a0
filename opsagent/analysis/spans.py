"""Trace analysis for an incident: each span's own time, call edges, per-service shifts.

Pure functions over :class:`~opsagent.fixtures.Span` records, shared by the replay and live trace
sources. A span's self time is its duration less the union of its children's intervals, so a
service that only waits on a slow callee shows no self-time shift. No I/O here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

import numpy as np

from opsagent.fixtures import Edge, Span, unix
from opsagent.models import Incident, OperationStats, ServiceSpanStats, TracesData
from opsagent.stats import safe_ratio

#: Fewer spans than this on either side of onset, and a service's time shift is not scored.
MIN_SPANS = 5


@dataclass(frozen=True)
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


def span_times(spans: Sequence[Span]) -> list[SpanTime]:
    """Each span's own time. The arithmetic runs over arrays (numpy), element by element in the same
    IEEE operations as one span at a time, so the results are the same to the last bit; only a span
    with two or more children walks their union in Python."""
    n = len(spans)
    if n == 0:
        return []
    start = np.fromiter((s.start_s for s in spans), dtype=np.float64, count=n)
    duration_us = np.fromiter((s.duration_us for s in spans), dtype=np.float64, count=n)
    end = start + duration_us / 1e6
    error = [s.status == "error" for s in spans]
    # a trace that repeats a span id gives every span of that id the same children, as the lookup by
    # id always did
    kids: dict[tuple[str, str], list[int]] = defaultdict(list)
    failing_child: set[tuple[str, str]] = set()
    for i, s in enumerate(spans):
        if s.parent_id:
            kids[(s.trace_id, s.parent_id)].append(i)
            if error[i]:
                failing_child.add((s.trace_id, s.parent_id))
    keys = [(s.trace_id, s.span_id) for s in spans]
    count = np.fromiter((len(kids.get(k, ())) for k in keys), dtype=np.int64, count=n)
    covered = np.zeros(n)
    # one child: its interval clipped to the parent, as _union_length computes it
    single = np.flatnonzero(count == 1)
    if single.size:
        child = np.fromiter((kids[keys[i]][0] for i in single), dtype=np.int64, count=single.size)
        lo = np.where(start[single] > start[child], start[single], start[child])
        hi = np.where(end[single] < end[child], end[single], end[child])
        covered[single] = np.where(hi <= lo, 0.0, hi - lo)
    for i in np.flatnonzero(count > 1).tolist():
        intervals = [(start[c], end[c]) for c in kids[keys[i]]]
        covered[i] = _union_length(intervals, start[i], end[i])
    own = end - start - covered
    self_ms = np.where(own < 0.0, 0.0, own) * 1000
    total_ms = duration_us / 1000
    origin = [e and k not in failing_child for e, k in zip(error, keys, strict=True)]
    return [
        SpanTime(
            service=s.service,
            operation=s.operation,
            start=st,
            self_ms=sm,
            total_ms=tm,
            error=e,
            origin_error=o,
            children=c,
        )
        for s, st, sm, tm, e, o, c in zip(
            spans, start.tolist(), self_ms.tolist(), total_ms.tolist(), error, origin, count.tolist(), strict=True
        )
    ]


def trace_edges(spans: Sequence[Span]) -> list[Edge]:
    """Caller -> callee service pairs, from parent/child spans of different services."""
    by_id = {(s.trace_id, s.span_id): s.service for s in spans}
    pairs = {
        (by_id[(s.trace_id, s.parent_id)], s.service)
        for s in spans
        if s.parent_id and (s.trace_id, s.parent_id) in by_id
    }
    return [Edge(caller=a, callee=b, source="traces") for a, b in sorted(pairs) if a != b]


def neighbours(edges: Sequence[Edge], service: str) -> tuple[list[str], list[str]]:
    """The callers and the callees of a service."""
    callers = sorted({e.caller for e in edges if e.callee == service})
    callees = sorted({e.callee for e in edges if e.caller == service})
    return callers, callees


def trace_summary(
    spans: Sequence[SpanTime], edges: Sequence[Edge], *, incident: Incident, service: str | None
) -> TracesData:
    """Per-service self-time shift, slowest operations, error spans, blocked parents."""
    b0, b1 = unix(incident.baseline.start), unix(incident.baseline.end)
    w0, w1 = unix(incident.onset), unix(incident.window.end)
    wanted: set[str] | None = None
    callers, callees = neighbours(edges, service) if service else ([], [])
    if service:
        wanted = {service, *callers, *callees}
    base: dict[str, list[SpanTime]] = defaultdict(list)
    win: dict[str, list[SpanTime]] = defaultdict(list)
    for sp in spans:
        if wanted is not None and sp.service not in wanted:
            continue
        if b0 <= sp.start < b1:
            base[sp.service].append(sp)
        elif w0 <= sp.start < w1:
            win[sp.service].append(sp)
    services = []
    for name in sorted(set(base) | set(win)):
        bs, ws = base.get(name, []), win.get(name, [])
        self_b = _p50([s.self_ms for s in bs])
        self_w = _p50([s.self_ms for s in ws])
        services.append(
            ServiceSpanStats(
                service=name,
                spans_baseline=len(bs),
                spans_window=len(ws),
                self_ms_baseline=self_b,
                self_ms_window=self_w,
                # A handful of sampled spans says nothing about a shift.
                self_shift=safe_ratio(self_w, max(self_b, 0.05))
                if self_b is not None and len(bs) >= MIN_SPANS and len(ws) >= MIN_SPANS
                else None,
                total_ms_baseline=_p50([s.total_ms for s in bs]),
                total_ms_window=_p50([s.total_ms for s in ws]),
                tail_total_shift=_tail_shift([s.total_ms for s in bs], [s.total_ms for s in ws]),
                tail_self_shift=_tail_shift([s.self_ms for s in bs], [s.self_ms for s in ws]),
                errors_baseline=sum(s.error for s in bs),
                errors_window=sum(s.error for s in ws),
                origin_errors_baseline=sum(s.origin_error for s in bs),
                origin_errors_window=sum(s.origin_error for s in ws),
                fanout_shift=_fanout_shift(bs, ws),
            )
        )
    ops: dict[tuple[str, str], list[SpanTime]] = defaultdict(list)
    for name, spans_of in win.items():
        for sp in spans_of:
            ops[(name, sp.operation)].append(sp)
    slowest = sorted(
        (
            OperationStats(
                service=svc,
                operation=op,
                p95_ms=round(_pct([s.total_ms for s in group], 0.95), 2),
                self_p95_ms=round(_pct([s.self_ms for s in group], 0.95), 2),
                count=len(group),
            )
            for (svc, op), group in ops.items()
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


def _p50(values: list[float]) -> float | None:
    return round(median(values), 3) if values else None


def _fanout_shift(base: list[SpanTime], window: list[SpanTime]) -> float | None:
    """Child calls per span that has any, window against baseline."""
    b = [s.children for s in base if s.children]
    w = [s.children for s in window if s.children]
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
