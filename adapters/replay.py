"""Replay sources: answer every data-source question from a recorded incident's raw telemetry.

The same protocols as the live adapters, computed from the fixture rather than queried, so any
strategy can ask any question of a recording. Read-only; indexes are built once per recording.

The computations are pure functions over raw records (:func:`signal_stats`, :func:`scan_stats`,
:func:`change_records`, :func:`span_times`, :func:`trace_edges`, :func:`trace_summary`): the live
sources (:mod:`adapters.live`) read the same records from a real system and call the same functions,
so an investigation sees the same observations live and in replay.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from statistics import median
from typing import Literal

from opsagent.catalog import SignalCatalog
from opsagent.errors import QueryRejected
from opsagent.fixtures import Change, Edge, LogRecord, MetricSeries, Recording, SignalDef, Span, unix
from opsagent.logsummary import SimpleSummariser, Summariser
from opsagent.models import (
    ChangeRecord,
    ChangesData,
    Incident,
    LogsData,
    OperationStats,
    SeriesStats,
    ServiceSpanStats,
    TimeRange,
    TracesData,
)
from opsagent.selector import Matcher, Selector, SelectorError, parse
from opsagent.stats import (
    NEAR_CEILING,
    SHORT_REFERENCE_RATIO,
    Sample,
    between,
    ceiling_of,
    change_point,
    combine,
    is_detached,
    reference,
    safe_ratio,
    shift_direction,
    this_period,
    ts,
)

#: Fewer spans than this on either side of onset, and a service's time shift is not scored.
MIN_SPANS = 5
SERVICE_LABELS = ("service", "app", "application", "service_name", "job", "component", "container")
_POD_SUFFIX = re.compile(r"^(.*?)(?:-[a-z0-9]{6,10})?-[a-z0-9]{5}$|^(.*?)-\d+$")


def known_services(rec: Recording) -> set[str]:
    names = {rec.alert.labels.get("service", "")}
    names.update(e.caller for e in rec.topology)
    names.update(e.callee for e in rec.topology)
    names.update(r.service for r in rec.logs)
    names.update(s.service for s in rec.traces)
    names.update(c.service for c in rec.changes)
    for series in rec.metrics:
        names.update(series.labels[label] for label in SERVICE_LABELS if label in series.labels)
    names.discard("")
    return names


def rollup(name: str, services: set[str]) -> str:
    """The service a pod or instance name belongs to."""
    best = max((s for s in services if name == s or name.startswith(s + "-")), key=len, default=None)
    if best:
        return best
    m = _POD_SUFFIX.match(name)
    return (m.group(1) or m.group(2)) if m else name


def component_of(labels: dict[str, str], services: set[str]) -> str:
    if "callee" in labels:
        return labels["callee"]
    for label in SERVICE_LABELS:
        if label in labels:
            return labels[label]
    for label in ("pod", "instance", "pod_name"):
        if label in labels:
            return rollup(labels[label].split(":")[0], services)
    return labels.get("__name__", "unknown")


def is_counter(name: str, kind: str | None) -> bool:
    """A series is a counter when it says so, or, saying nothing, when its name ends in ``_total``."""
    return kind == "counter" or (kind is None and name.endswith("_total"))


def as_rate(series: MetricSeries, default_type: str | None = None) -> list[Sample]:
    """Counters become per-sample increases (reset-aware); gauges pass through."""
    if not is_counter(series.name, series.type or default_type):
        return list(series.samples)
    out: list[Sample] = []
    for (_, prev), (t, cur) in zip(series.samples, series.samples[1:], strict=False):
        out.append((t, cur - prev if cur >= prev else cur))
    return out


#: A ceiling as a signal's stats take it: a constant, a series (the ceiling in force at each time), or none.
Limit = list[Sample] | float | None


def ceiling_series(matched: Sequence[MetricSeries], agg: Literal["max", "sum", "mean"]) -> Limit:
    """The ceiling series, combined across pods the same way as the signal it bounds."""
    return combine([as_rate(m) for m in matched], agg) if matched else None


def signal_stats(
    matched: Sequence[MetricSeries],
    *,
    query: str,
    signal: str,
    component: str,
    spec: SignalDef,
    incident: Incident,
    limit: Limit,
) -> SeriesStats:
    """Statistics of the series a query matched, pods combined by the signal's aggregation."""
    samples = combine([as_rate(m, spec.type) for m in matched], spec.agg)
    return series_stats(
        samples,
        incident=incident,
        signal=signal,
        component=component,
        query=query,
        spec=spec,
        series=len(matched),
        limit=limit,
    )


@dataclass(frozen=True)
class ScanGroup:
    """The series of one metric of one component (of one call edge, for edge metrics)."""

    component: str
    metric: str
    caller: str
    members: list[list[Sample]]

    def spec(self, catalog: SignalCatalog) -> tuple[str | None, SignalDef]:
        signal = catalog.signal_of(self.metric)
        found = catalog.get(signal) if signal else None
        return signal, found or SignalDef(query=self.metric, direction="any")

    def limit_query(self, catalog: SignalCatalog) -> str | None:
        _, spec = self.spec(catalog)
        return spec.limit.replace("$service", self.component) if spec.limit else None


def scan_groups(series: Iterable[tuple[MetricSeries, str, list[Sample]]]) -> list[ScanGroup]:
    """Series grouped by component, metric and caller, in a stable order."""
    groups: dict[tuple[str, str, str], list[list[Sample]]] = defaultdict(list)
    for s, component, samples in series:
        groups[(component, s.name, s.labels.get("caller", ""))].append(samples)
    return [ScanGroup(c, m, e, members) for (c, m, e), members in sorted(groups.items())]


def scan_stats(group: ScanGroup, *, catalog: SignalCatalog, incident: Incident, limit: Limit) -> SeriesStats:
    signal, spec = group.spec(catalog)
    edge, component = group.caller, group.component
    label = f'{{caller="{edge}", callee="{component}"}}' if edge else f'{{service="{component}"}}'
    return series_stats(
        combine(group.members, spec.agg),
        incident=incident,
        signal=signal or group.metric,
        component=component,
        query=group.metric + label,
        spec=spec,
        series=len(group.members),
        limit=limit,
    )


def series_stats(
    samples: list[Sample],
    *,
    incident: Incident,
    signal: str,
    component: str,
    query: str,
    spec: SignalDef,
    series: int,
    limit: list[Sample] | float | None,
) -> SeriesStats:
    b0, b1 = unix(incident.baseline.start), unix(incident.baseline.end)
    onset, end = unix(incident.onset), unix(incident.window.end)
    refer = partial(reference, baseline=(b0, b1), window_start=unix(incident.window.start), onset=onset)
    win = between(samples, onset, end)
    ref = refer(samples)
    centre, spread = (ref.centre, ref.spread) if ref else (None, None)
    window_max = max(win) if win else None
    level = _worse_half(win, spec.direction, centre) if win else None
    z = (level - centre) / spread if level is not None and centre is not None and spread else None
    ratio = safe_ratio(level, centre)
    bar = {"min_ratio": SHORT_REFERENCE_RATIO, "max_ratio": 1 / SHORT_REFERENCE_RATIO} if ref and ref.short else {}
    direction = shift_direction(z, ratio, **bar)
    top = ceiling_of(spec.unit) if spec.direction == "down" else None
    if top is not None and level is not None and centre is not None and centre >= NEAR_CEILING * top:
        # Judged by its shortfall from the ceiling: 99.9% -> 99% is ten times the failures.
        gap = refer([(t, top - v) for t, v in samples])
        if gap is not None:
            z = -((top - level) - gap.centre) / gap.spread
            moved = shift_direction(-z, safe_ratio(top - level, gap.centre), **bar)
            direction = "down" if moved == "up" else "up" if moved == "down" else moved
    if level is not None and centre is not None and abs(level - centre) < spec.min_delta:
        direction = "flat"
    if (spec.direction == "down" and direction == "up") or (spec.direction == "up" and direction == "down"):
        direction = "flat" if direction != "unknown" else direction
    detached = is_detached((b0, b1), window_start=unix(incident.window.start), onset=onset)
    cp = change_point(this_period(samples, (b0, b1)) if detached else samples, onset - 30 * 60, end)
    return SeriesStats(
        signal=signal,
        component=component,
        query=query,
        unit=spec.unit,
        series=series,
        baseline_mean=centre,
        baseline_std=spread,
        window_mean=level,
        window_max=window_max,
        peak_ratio=safe_ratio(window_max, centre),
        mean_ratio=ratio,
        z_score=z,
        change_point=ts(cp) if cp is not None else None,
        **_against_limit(samples, limit, onset, end),
        direction=direction,
    )


def _against_limit(
    samples: list[Sample], limit: list[Sample] | float | None, start: float, end: float
) -> dict[str, float | None]:
    """How close the window came to its ceiling, each sample against the ceiling in force then
    (a pool resized from 32 to 4 mid-window is full at 4)."""
    if limit is None:
        return {"limit": None, "limit_fraction": None}
    if isinstance(limit, float | int):
        peak = max(between(samples, start, end), default=None)
        return {"limit": float(limit), "limit_fraction": safe_ratio(peak, float(limit))}
    ceiling = sorted(limit)
    best: tuple[float, float] | None = None
    for t, v in samples:
        if not (start <= t < end):
            continue
        i = bisect_right(ceiling, (t, math.inf)) - 1
        lim = ceiling[max(i, 0)][1] if ceiling else None
        frac = safe_ratio(v, lim)
        if frac is not None and lim and (best is None or frac > best[0]):
            best = (frac, lim)
    if best is None:
        return {"limit": None, "limit_fraction": None}
    return {"limit": best[1], "limit_fraction": best[0]}


def _worse_half(values: list[float], direction: str, centre: float | None) -> float:
    """Mean of the worse half of the window: a 12-minute spike in a 30-minute window still shows."""
    ordered = sorted(values)
    half = max(1, len(ordered) // 2)
    if direction == "down":
        chosen = ordered[:half]
    elif direction == "up" or centre is None:
        chosen = ordered[-half:]
    else:
        low, high = ordered[:half], ordered[-half:]
        lo_mean, hi_mean = sum(low) / len(low), sum(high) / len(high)
        chosen = low if abs(lo_mean - centre) > abs(hi_mean - centre) else high
    return sum(chosen) / len(chosen)


class ReplayMetrics:
    name = "metrics:replay"

    def __init__(self, recording: Recording, catalog: SignalCatalog) -> None:
        self.recording = recording
        self.catalog = catalog
        self.services = known_services(recording)
        self._series = [(s, component_of(s.labels, self.services), as_rate(s)) for s in recording.metrics]

    def _select(self, selector: Selector) -> list[tuple[MetricSeries, str, list[Sample]]]:
        out = []
        for series, component, samples in self._series:
            if selector.name and series.name != selector.name:
                continue
            if all(self._matches(m, series.labels, component) for m in selector.matchers):
                out.append((series, component, samples))
        return out

    @staticmethod
    def _matches(matcher: Matcher, labels: dict[str, str], component: str) -> bool:
        if matcher.label in labels:
            return matcher.matches(labels[matcher.label])
        # A service matcher also selects the pods that roll up to that service.
        if matcher.label in SERVICE_LABELS:
            return matcher.matches(component)
        return matcher.matches(None)

    def _parse(self, query: str) -> Selector:
        try:
            return parse(query)
        except SelectorError as exc:
            raise QueryRejected(str(exc), source=self.name, query=query) from exc

    def _limit(self, query: str | None, agg: Literal["max", "sum", "mean"]) -> Limit:
        if not query:
            return None
        sel = self._parse(query)
        if sel.constant is not None:
            return sel.constant
        return ceiling_series([m for m, _, _ in self._select(sel)], agg)

    async def stats(
        self, *, query: str, signal: str, component: str, spec: SignalDef, incident: Incident
    ) -> SeriesStats | None:
        matched = self._select(self._parse(query))
        if not matched:
            return None
        limit_q = spec.limit.replace("$service", component) if spec.limit else None
        return signal_stats(
            [m for m, _, _ in matched],
            query=query,
            signal=signal,
            component=component,
            spec=spec,
            incident=incident,
            limit=self._limit(limit_q, spec.agg),
        )

    async def scan(self, *, incident: Incident) -> list[SeriesStats]:
        out = []
        for group in scan_groups(self._series):
            _, spec = group.spec(self.catalog)
            limit = self._limit(group.limit_query(self.catalog), spec.agg)
            out.append(scan_stats(group, catalog=self.catalog, incident=incident, limit=limit))
        return out


def post_onset(incident: Incident) -> TimeRange:
    return TimeRange(start=incident.onset, end=incident.window.end)


class ReplayLogs:
    name = "logs:replay"

    def __init__(self, recording: Recording, summariser: Summariser | None = None) -> None:
        self.recording = recording
        self.summariser = summariser or SimpleSummariser()
        self._by_service: dict[str, list[LogRecord]] = defaultdict(list)
        for rec in recording.logs:
            self._by_service[rec.service].append(rec)

    async def summary(self, *, incident: Incident, service: str | None, text: str | None) -> LogsData:
        records = self._by_service.get(service, []) if service else self.recording.logs
        if text:
            pattern = text_pattern(text, source=self.name)
            records = [r for r in records if pattern.search(r.message)]
        return self.summariser.summarise(
            records, baseline=incident.baseline, window=post_onset(incident), service=service
        )


def text_pattern(text: str, *, source: str) -> re.Pattern[str]:
    """The ``text`` argument of ``logs.summary``: a case-insensitive regular expression."""
    try:
        return re.compile(text, re.I)
    except re.error as exc:
        raise QueryRejected(f"bad log text pattern: {exc}", source=source, query=text) from exc


class ReplayChanges:
    name = "changes:replay"

    def __init__(self, recording: Recording) -> None:
        self.recording = recording

    async def changes(self, *, incident: Incident, service: str | None, before_min: float) -> ChangesData:
        return change_records(self.recording.changes, incident=incident, service=service, before_min=before_min)


def changes_range(incident: Incident, before_min: float) -> tuple[float, float]:
    """From ``before_min`` minutes before onset to the end of the window, unix seconds."""
    return unix(incident.onset) - before_min * 60, unix(incident.window.end)


def change_records(
    changes: Iterable[Change], *, incident: Incident, service: str | None, before_min: float
) -> ChangesData:
    """The changes of a service (or all) from ``before_min`` minutes before onset to the window's end."""
    onset = unix(incident.onset)
    start, end = changes_range(incident, before_min)
    out = [
        ChangeRecord(
            id=c.id,
            ts=c.ts,
            end=c.end,
            service=c.service,
            kind=c.kind,
            summary=c.summary,
            from_version=c.from_version,
            to_version=c.to_version,
            author=c.author,
            diff=c.diff,
            minutes_before_onset=round((onset - unix(c.ts)) / 60, 1),
        )
        for c in changes
        if start <= unix(c.ts) <= end and (service is None or c.service == service)
    ]
    out.sort(key=lambda c: c.ts)
    return ChangesData(changes=out)


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
    children: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    failing_child: set[tuple[str, str]] = set()
    for s in spans:
        if s.parent_id:
            children[(s.trace_id, s.parent_id)].append((s.start_s, s.start_s + s.duration_us / 1e6))
            if s.status == "error":
                failing_child.add((s.trace_id, s.parent_id))
    out = []
    for s in spans:
        start, end = s.start_s, s.start_s + s.duration_us / 1e6
        kids = children.get((s.trace_id, s.span_id), [])
        covered = _union_length(kids, start, end)
        out.append(
            SpanTime(
                service=s.service,
                operation=s.operation,
                start=start,
                self_ms=max(end - start - covered, 0.0) * 1000,
                total_ms=s.duration_us / 1000,
                error=s.status == "error",
                origin_error=s.status == "error" and (s.trace_id, s.span_id) not in failing_child,
                children=len(kids),
            )
        )
    return out


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


class ReplayTraces:
    name = "traces:replay"

    def __init__(self, recording: Recording) -> None:
        self.recording = recording

    @cached_property
    def _spans(self) -> list[SpanTime]:
        return span_times(self.recording.traces)

    @cached_property
    def _edges(self) -> list[Edge]:
        return trace_edges(self.recording.traces)

    async def topology(self, *, incident: Incident) -> list[Edge]:
        return self._edges

    async def summary(self, *, incident: Incident, service: str | None) -> TracesData:
        return trace_summary(self._spans, self._edges, incident=incident, service=service)


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
