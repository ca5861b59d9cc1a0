"""Live sources: the engine's four source protocols over readers of real systems.

Each live source asks its reader for raw telemetry (the recorded-incident models) and computes the
observation with the same functions the replay sources use (:mod:`opsagent.analysis`), so the same
telemetry gives the same observation live and in replay. Several readers of one kind (two
Prometheus, two log clusters) read as one through a fan-out reader. Nothing here talks to a system:
readers do, and they are read-only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Literal, TypeVar

import structlog

from opsagent.analysis.changes import change_records, changes_range
from opsagent.analysis.gaps import call_gaps
from opsagent.analysis.logs import post_onset, text_pattern
from opsagent.analysis.series import (
    SERVICE_LABELS,
    Limit,
    PeerNoise,
    as_rate,
    ceiling_series,
    component_of,
    partners,
    peer_noise,
    scan_figures,
    scan_groups,
    scan_stats,
    side_of,
    signal_stats,
)
from opsagent.analysis.spans import neighbours, span_times, trace_summary
from opsagent.analysis.steps import step_shortfalls
from opsagent.analysis.versions import caller_names, compare_versions, pod_of
from opsagent.calls import report_partial
from opsagent.catalog import SignalCatalog
from opsagent.errors import SourceError
from opsagent.fixtures import Change, Edge, KubeKind, KubeObject, LogRecord, MetricSeries, SignalDef, Span, unix
from opsagent.logsummary import SimpleSummariser, Summariser
from opsagent.models import (
    ChangeRecord,
    ChangesData,
    Incident,
    LogsData,
    SeriesStats,
    TimeRange,
    TracesData,
    VersionsData,
)
from opsagent.selector import SelectorError, parse
from opsagent.sources.queries import LogBatch, LogCounts, LogQuery
from opsagent.sources.readers import ChangesReader, KubernetesReader, LogsReader, MetricsReader, TracesReader
from opsagent.stats import ts

log = structlog.get_logger("opsagent.adapters")

R = TypeVar("R")
A = TypeVar("A")
Agg = Literal["max", "sum", "mean"]


def metrics_range(incident: Incident) -> tuple[float, float]:
    """Unix seconds from the start of the baseline (or window) to the end of the window."""
    return min(unix(incident.baseline.start), unix(incident.window.start)), unix(incident.window.end)


def _incident_key(incident: Incident) -> str:
    return f"{incident.id}|{incident.onset.isoformat()}|{incident.baseline.start.isoformat()}"


def _unique(answers: Iterable[Sequence[MetricSeries]]) -> list[MetricSeries]:
    """The series of several answers, each once (by name and labels)."""
    return list({(s.name, tuple(sorted(s.labels.items()))): s for found in answers for s in found}.values())


class LiveMetrics:
    def __init__(
        self, reader: MetricsReader, *, catalog: SignalCatalog, scan_catalog: SignalCatalog | None = None
    ) -> None:
        self.reader = reader
        self.catalog = catalog
        #: names scanned series by signal; full-PromQL entries cannot map a metric name back
        self.scan_catalog = scan_catalog or catalog
        self.name = reader.name
        #: the peers' noise the last scan of an incident measured, for the signal checks that follow it
        self._noise: dict[str, dict[tuple[str, str | None], PeerNoise]] = {}

    async def _limit(self, query: str | None, agg: Agg, start: float, end: float) -> Limit:
        if not query:
            return None
        try:
            constant = parse(query).constant
        except SelectorError:
            constant = None  # full PromQL: the server evaluates it
        if constant is not None:
            return constant
        return ceiling_series(await self.reader.series(query=query, start=start, end=end), agg)

    async def stats(
        self, *, query: str, signal: str, component: str, spec: SignalDef, incident: Incident
    ) -> SeriesStats | None:
        start, end = metrics_range(incident)
        limit_q = spec.limit.replace("$service", component) if spec.limit else None
        matched, limit = await asyncio.gather(
            self.reader.series(query=query, start=start, end=end), self._limit(limit_q, spec.agg, start, end)
        )
        if not matched:
            return None
        peers = self._noise.get(_incident_key(incident), {}).get((matched[0].name, side_of(matched[0].labels)))
        return signal_stats(
            matched,
            query=query,
            signal=signal,
            component=component,
            spec=spec,
            incident=incident,
            limit=limit,
            peers=peers,
        )

    async def versions(self, *, incident: Incident, service: str, rollout: ChangeRecord | None = None) -> VersionsData:
        start, end = metrics_range(incident)
        # Series of the service that carry a version label (pods of a rollout in progress), and those
        # of the pods the rollout names, which may carry none.
        queries = [f'{{service="{service}", version!=""}}']
        pods = sorted({p for names in (rollout.pods.values() if rollout else ()) for p in names})
        if pods:
            queries.append(f'{{pod=~"{"|".join(pods)}"}}')  # pod names are DNS labels: no quoting needed
        answers = await asyncio.gather(*(self.reader.series(query=q, start=start, end=end) for q in queries))
        mine = [s for s in _unique(answers) if component_of(s.labels, {service}) == service or pod_of(s.labels) in pods]
        # The calls into and out of its callers: a release that answers wrongly fails them, not itself.
        callers = "|".join(sorted(caller_names(mine, service)))  # service names are DNS labels, like pods
        calls: list[MetricSeries] = []
        if callers:
            found = await asyncio.gather(
                *(
                    self.reader.series(query=f'{{{side}=~"{callers}"}}', start=start, end=end)
                    for side in ("callee", "caller")
                )
            )
            calls = _unique(found)
        return compare_versions(mine, service=service, incident=incident, rollout=rollout, callers=calls)

    async def scan(self, *, incident: Incident) -> list[SeriesStats]:
        start, end = metrics_range(incident)
        found = await self.reader.everything(start=start, end=end)
        services = {s.labels[label] for s in found for label in SERVICE_LABELS if s.labels.get(label)}
        services.update(incident.services)
        groups = scan_groups((s, component_of(s.labels, services), as_rate(s)) for s in found)
        wanted: dict[tuple[str, Agg], None] = {}
        for group in groups:
            query = group.limit_query(self.scan_catalog)
            if query:
                wanted[(query, group.spec(self.scan_catalog)[1].agg)] = None
        answers = await asyncio.gather(*(self._limit(q, agg, start, end) for q, agg in wanted))
        limits = dict(zip(wanted, answers, strict=True))
        # every group combined and measured once, all at once, for the peers' noise and its statistics
        scanned = scan_figures(groups, catalog=self.scan_catalog, incident=incident)
        noise = peer_noise(groups, catalog=self.scan_catalog, incident=incident, scanned=scanned)
        self._noise[_incident_key(incident)] = noise
        other_end = partners(groups)
        out = []
        for i, group in enumerate(groups):
            query = group.limit_query(self.scan_catalog)
            limit = limits[(query, group.spec(self.scan_catalog)[1].agg)] if query else None
            peers = noise.get((group.metric, group.side))
            out.append(
                scan_stats(
                    group,
                    catalog=self.scan_catalog,
                    incident=incident,
                    limit=limit,
                    peers=peers,
                    partner=other_end.get(i),
                    scanned=scanned.of(i),
                )
            )
        return out


class LiveLogs:
    def __init__(self, reader: LogsReader, *, summariser: Summariser | None = None) -> None:
        self.reader = reader
        self.summariser = summariser or SimpleSummariser()
        self.name = reader.name

    async def summary(self, *, incident: Incident, service: str | None, text: str | None) -> LogsData:
        pattern = text_pattern(text, source=self.name) if text else None
        baseline, window = incident.baseline, post_onset(incident)
        query = LogQuery(service=service, text=text, baseline=baseline, window=window)
        batch = await self.reader.records(query=query)
        records: Sequence[LogRecord] = batch.records
        if pattern is not None:  # the store's text match is coarser than the tool's regex
            records = [r for r in records if pattern.search(r.message)]
        data = self.summariser.summarise(records, baseline=baseline, window=window, service=service)
        if batch.complete:
            return data
        if batch.counts is None:  # a sample of the lines, and nothing exact to set beside it
            return data.model_copy(update={"estimated": True})
        return exact_counts(data, batch.counts, self.summariser, baseline=baseline, window=window)


def exact_counts(
    data: LogsData, counts: LogCounts, summariser: Summariser, *, baseline: TimeRange, window: TimeRange
) -> LogsData:
    """A summary of capped records, its counts and histograms replaced by the store's exact ones."""
    raw_levels = set(counts.window_by_level)
    for bucket in counts.buckets:
        raw_levels.update(bucket.levels)
    names = level_names(summariser, raw_levels, baseline=baseline, window=window)
    by_level: dict[str, int] = {}
    for raw, n in counts.window_by_level.items():
        level = names[raw][0]
        by_level[level] = by_level.get(level, 0) + n
    histogram = [0] * len(data.histogram)
    errors = [0] * len(data.error_histogram)
    if data.histogram_start is not None and data.histogram_step_s:
        for bucket in counts.buckets:
            i = int((bucket.start - data.histogram_start).total_seconds() // data.histogram_step_s)
            if 0 <= i < len(histogram):
                histogram[i] += sum(bucket.levels.values())
                errors[i] += sum(n for raw, n in bucket.levels.items() if names[raw][1])
    return data.model_copy(
        update={
            "total": counts.total,
            "by_level": dict(sorted(by_level.items(), key=lambda kv: -kv[1])),
            "by_service": dict(sorted(counts.window_by_service.items(), key=lambda kv: -kv[1])),
            "histogram": histogram,
            "error_histogram": errors,
            "estimated": True,
        }
    )


def level_names(
    summariser: Summariser, raw_levels: set[str], *, baseline: TimeRange, window: TimeRange
) -> dict[str, tuple[str, bool]]:
    """How the summariser names each stored spelling of a level, and whether it counts it as an error.

    The summariser owns level spellings; asking it (one line per spelling) keeps one normalisation.
    """
    out = {}
    for raw in sorted(raw_levels):
        probe = summariser.summarise(
            [LogRecord(ts=window.start, service="-", level=raw, message="-")],
            baseline=baseline,
            window=window,
            service=None,
        )
        out[raw] = (next(iter(probe.by_level), raw), sum(probe.error_histogram) > 0)
    return out


class LiveChanges:
    def __init__(self, reader: ChangesReader) -> None:
        self.reader = reader
        self.name = reader.name

    async def changes(self, *, incident: Incident, service: str | None, before_min: float) -> ChangesData:
        start, end = changes_range(incident, before_min)
        found = await self.reader.changes(start=ts(start), end=ts(end) + timedelta(seconds=1), service=service)
        return change_records(found, incident=incident, service=service, before_min=before_min)


class LiveTraces:
    def __init__(self, reader: TracesReader) -> None:
        self.reader = reader
        self.name = reader.name

    async def topology(self, *, incident: Incident) -> list[Edge]:
        return await self.reader.edges(start=incident.window.start, end=incident.window.end)

    async def summary(self, *, incident: Incident, service: str | None) -> TracesData:
        wanted: list[str] | None = None
        edges: list[Edge] = []
        if service:
            edges = await self.topology(incident=incident)
            callers, callees = neighbours(edges, service)
            wanted = sorted({service, *callers, *callees})
        base, win = await asyncio.gather(
            self.reader.spans(services=wanted, start=incident.baseline.start, end=incident.baseline.end),
            self.reader.spans(services=wanted, start=incident.onset, end=incident.window.end),
        )
        spans = unique_spans([*base, *win])
        data = trace_summary(span_times(spans), edges, incident=incident, service=service)
        return data.model_copy(
            update={
                "call_gaps": call_gaps(spans, incident=incident, service=service),
                "step_shortfalls": step_shortfalls(spans, (), incident=incident),
            }
        )


def unique_spans(spans: Sequence[Span]) -> list[Span]:
    """Each span once: a trace that touches two services is returned for both."""
    seen: dict[tuple[str, str], Span] = {}
    for s in spans:
        seen.setdefault((s.trace_id, s.span_id), s)
    return list(seen.values())


# ---------------------------------------------------------------- several instances of one kind


async def fan_out(name: str, readers: Sequence[R], call: Callable[[R], Awaitable[A]]) -> list[A]:
    """Every reader's answer. Each instance that failed is accounted for: in the tool call's ledger
    when another answered, or, when none did, in the error raised, which names every one of them."""
    results: list[A | BaseException] = await asyncio.gather(*(call(r) for r in readers), return_exceptions=True)
    answers: list[A] = []
    failures: list[SourceError] = []
    for result in results:
        if isinstance(result, SourceError):
            failures.append(result)
        elif isinstance(result, BaseException):
            raise result
        else:
            answers.append(result)
    if failures and not answers:
        first = failures[0]
        kind = type(first) if all(type(f) is type(first) for f in failures) else SourceError
        text = "; ".join(f"{f.source}: {f}" for f in failures)
        raise kind(f"no instance answered ({text})", source=name, query=first.query, instances=failures)
    for failure in failures:
        report_partial(failure)
    return answers


def _fanned_name(
    readers: Sequence[MetricsReader | LogsReader | ChangesReader | TracesReader | KubernetesReader],
) -> str:
    kind = readers[0].name.split(":")[0]
    return kind + ":" + "+".join(r.name.split(":", 1)[-1] for r in readers)


class MetricsFanOut:
    """Several Prometheus read as one; a series two of them hold (an HA pair) counts once."""

    def __init__(self, readers: Sequence[MetricsReader]) -> None:
        self.readers = list(readers)
        self.name = _fanned_name(self.readers)

    @staticmethod
    def _merge(answers: list[list[MetricSeries]]) -> list[MetricSeries]:
        seen: dict[tuple[tuple[str, str], ...], MetricSeries] = {}
        for answer in answers:
            for s in answer:
                seen.setdefault(tuple(sorted(s.labels.items())), s)
        return list(seen.values())

    async def series(self, *, query: str, start: float, end: float) -> list[MetricSeries]:
        answers = await fan_out(self.name, self.readers, lambda r: r.series(query=query, start=start, end=end))
        return self._merge(answers)

    async def everything(self, *, start: float, end: float) -> list[MetricSeries]:
        answers = await fan_out(self.name, self.readers, lambda r: r.everything(start=start, end=end))
        return self._merge(answers)


class LogsFanOut:
    """Several log clusters read as one: records concatenated, counts added."""

    def __init__(self, readers: Sequence[LogsReader]) -> None:
        self.readers = list(readers)
        self.name = _fanned_name(self.readers)

    async def records(self, *, query: LogQuery) -> LogBatch:
        answers = await fan_out(self.name, self.readers, lambda r: r.records(query=query))
        batches = answers
        records = sorted((r for b in batches for r in b.records), key=lambda r: r.ts)
        complete = all(b.complete for b in batches)
        counted = [b.counts for b in batches if b.counts is not None]
        counts = None
        if not complete and len(counted) == len(batches):
            counts = LogCounts(
                total=sum(c.total for c in counted),
                window_by_level=_add([c.window_by_level for c in counted]),
                window_by_service=_add([c.window_by_service for c in counted]),
                buckets=[b for c in counted for b in c.buckets],
            )
        return LogBatch(records=records, counts=counts, complete=complete)


def _add(counts: list[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for k, n in c.items():
            out[k] = out.get(k, 0) + n
    return out


class ChangesFanOut:
    def __init__(self, readers: Sequence[ChangesReader]) -> None:
        self.readers = list(readers)
        self.name = _fanned_name(self.readers)

    async def changes(self, *, start: datetime, end: datetime, service: str | None) -> list[Change]:
        answers = await fan_out(self.name, self.readers, lambda r: r.changes(start=start, end=end, service=service))
        seen: dict[str, Change] = {}
        for answer in answers:
            for c in answer:
                seen.setdefault(c.id, c)
        return list(seen.values())


class TracesFanOut:
    def __init__(self, readers: Sequence[TracesReader]) -> None:
        self.readers = list(readers)
        self.name = _fanned_name(self.readers)

    async def spans(self, *, services: Sequence[str] | None, start: datetime, end: datetime) -> list[Span]:
        answers = await fan_out(self.name, self.readers, lambda r: r.spans(services=services, start=start, end=end))
        return unique_spans([s for a in answers for s in a])

    async def edges(self, *, start: datetime, end: datetime) -> list[Edge]:
        answers = await fan_out(self.name, self.readers, lambda r: r.edges(start=start, end=end))
        pairs = {(e.caller, e.callee) for a in answers for e in a}
        return [Edge(caller=a, callee=b, source="traces") for a, b in sorted(pairs)]


class KubernetesFanOut:
    """Several clusters read as one; an object two readers both see (same namespace and name) counts once."""

    def __init__(self, readers: Sequence[KubernetesReader]) -> None:
        self.readers = list(readers)
        self.name = _fanned_name(self.readers)

    async def objects(self, *, kind: KubeKind) -> list[KubeObject]:
        answers = await fan_out(self.name, self.readers, lambda r: r.objects(kind=kind))
        seen: dict[tuple[str, str], KubeObject] = {}
        for answer in answers:
            for o in answer:
                seen.setdefault((o.namespace, o.name), o)
        return list(seen.values())
