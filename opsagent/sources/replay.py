"""Replay sources: answer every data-source question from a recorded incident's raw telemetry.

The same protocols as the live sources, computed from the fixture rather than queried, so any
strategy can ask any question of a recording. Read-only; indexes are built once per recording.
The computations are the engine's (:mod:`opsagent.analysis`), shared with the live sources
(:mod:`opsagent.sources.live`), so an investigation sees the same observations live and in replay.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from datetime import datetime
from functools import cached_property
from itertools import compress, repeat
from typing import Literal, cast

import numpy as np

from opsagent.analysis.changes import change_records
from opsagent.analysis.columns import SpanColumns
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
from opsagent.analysis.spans import SpanTimes, span_times, trace_edges, trace_summary
from opsagent.analysis.steps import StepLines, step_columns, step_shortfalls
from opsagent.analysis.versions import caller_names, compare_versions, pod_of
from opsagent.catalog import SignalCatalog
from opsagent.errors import QueryRejected
from opsagent.fixtures import Edge, MetricSeries, RecordedLine, Recording, Samples, SignalDef
from opsagent.logsummary import SimpleSummariser, Summariser
from opsagent.models import (
    CallGap,
    ChangeRecord,
    ChangesData,
    Incident,
    LogsData,
    SeriesStats,
    StepShortfall,
    TracesData,
    VersionsData,
)
from opsagent.selector import Matcher, Selector, SelectorError, parse
from opsagent.sources import Sources
from opsagent.sources.kubernetes import replay_kubernetes


def replay_sources(recording: Recording, catalog: SignalCatalog, summariser: Summariser | None = None) -> Sources:
    """A source for each kind of telemetry the recording holds."""
    present = recording.present
    kubernetes, with_rollouts = replay_kubernetes(recording)  # rollout history joins the changes
    return Sources(
        metrics=ReplayMetrics(recording, catalog) if "metrics" in present else None,
        logs=ReplayLogs(recording, summariser) if "logs" in present else None,
        changes=ReplayChanges(with_rollouts) if present & {"changes", "kubernetes"} else None,
        traces=ReplayTraces(recording) if "traces" in present else None,
        kubernetes=kubernetes,
    )


def known_services(rec: Recording) -> set[str]:
    names = {rec.alert.labels.get("service", "")}
    names.update(e.caller for e in rec.topology)
    names.update(e.callee for e in rec.topology)
    names.update(r.service for r in rec.logs)
    names.update(rec.traces.services)
    names.update(c.service for c in rec.changes)
    for series in rec.metrics:
        names.update(series.labels[label] for label in SERVICE_LABELS if label in series.labels)
    names.discard("")
    return names


class ReplayMetrics:
    name = "metrics:replay"

    def __init__(self, recording: Recording, catalog: SignalCatalog) -> None:
        self.recording = recording
        self.catalog = catalog
        self.services = known_services(recording)
        self._series = [(s, component_of(s.labels, self.services), as_rate(s)) for s in recording.metrics]
        self._groups = scan_groups(self._series)
        self._noise: dict[str, dict[tuple[str, str | None], PeerNoise]] = {}

    @staticmethod
    def _key(incident: Incident) -> str:
        return f"{incident.id}|{incident.onset.isoformat()}|{incident.baseline.start.isoformat()}"

    def _select(self, selector: Selector) -> list[tuple[MetricSeries, str, Samples]]:
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
        first = matched[0][0]
        return signal_stats(
            [m for m, _, _ in matched],
            query=query,
            signal=signal,
            component=component,
            spec=spec,
            incident=incident,
            limit=self._limit(limit_q, spec.agg),
            # Like the live source: the peers' noise of this incident's scan, once it has run.
            peers=self._noise.get(self._key(incident), {}).get((first.name, side_of(first.labels))),
        )

    async def versions(self, *, incident: Incident, service: str, rollout: ChangeRecord | None = None) -> VersionsData:
        known = {p for pods in (rollout.pods.values() if rollout else ()) for p in pods}
        mine = [
            series for series, component, _ in self._series if component == service or pod_of(series.labels) in known
        ]
        callers = caller_names(mine, service)
        calls = [
            s for s, _, _ in self._series if s.labels.get("callee") in callers or s.labels.get("caller") in callers
        ]
        return compare_versions(mine, service=service, incident=incident, rollout=rollout, callers=calls)

    async def scan(self, *, incident: Incident) -> list[SeriesStats]:
        out = []
        # every group combined and measured once, all at once, for the peers' noise and its statistics
        scanned = scan_figures(self._groups, catalog=self.catalog, incident=incident)
        peers = peer_noise(self._groups, catalog=self.catalog, incident=incident, scanned=scanned)
        self._noise[self._key(incident)] = peers
        other_end = partners(self._groups)
        for i, group in enumerate(self._groups):
            _, spec = group.spec(self.catalog)
            limit = self._limit(group.limit_query(self.catalog), spec.agg)
            noise = peers.get((group.metric, group.side))
            out.append(
                scan_stats(
                    group,
                    catalog=self.catalog,
                    incident=incident,
                    limit=limit,
                    peers=noise,
                    partner=other_end.get(i),
                    scanned=scanned.of(i),
                )
            )
        return out


class ReplayLogs:
    name = "logs:replay"

    def __init__(self, recording: Recording, summariser: Summariser | None = None) -> None:
        self.recording = recording
        self.summariser = summariser or SimpleSummariser()
        self._by_service: dict[str, list[RecordedLine]] = defaultdict(list)
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


class ReplayChanges:
    name = "changes:replay"

    def __init__(self, recording: Recording) -> None:
        self.recording = recording

    async def changes(self, *, incident: Incident, service: str | None, before_min: float) -> ChangesData:
        return change_records(self.recording.changes, incident=incident, service=service, before_min=before_min)


#: A recorded log line's fields (a :class:`~opsagent.fixtures.RecordedLine`, or a log record), read by name.
_TS, _SERVICE, _MESSAGE, _TRACE_ID, _EXTRA = map(
    operator.attrgetter, ("ts", "service", "message", "trace_id", "model_extra")
)


class ReplayTraces:
    name = "traces:replay"

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self._measured: dict[tuple[object, ...], tuple[list[CallGap], list[StepShortfall]]] = {}

    @property
    def _columns(self) -> SpanColumns:
        """The recording's spans, read into columns by the loader for every analysis of them."""
        return self.recording.traces

    @cached_property
    def _spans(self) -> SpanTimes:
        return span_times(self._columns)

    @cached_property
    def _edges(self) -> list[Edge]:
        return trace_edges(self._columns)

    async def topology(self, *, incident: Incident) -> list[Edge]:
        return self._edges

    @cached_property
    def _step_lines(self) -> StepLines:
        """The recording's log lines that name their span (or trace), as steps of that span."""

        logs = self.recording.logs
        # a line's span: its span id, else its trace and component; a line naming neither is no step
        spans = [
            str(extra["span_id"]) if extra and extra.get("span_id") else (f"{trace}/{name}" if trace else None)
            for extra, trace, name in zip(map(_EXTRA, logs), map(_TRACE_ID, logs), map(_SERVICE, logs), strict=True)
        ]
        named = list(map(operator.is_not, spans, repeat(None)))
        lines = list(compress(logs, named))
        return step_columns(
            ts=np.fromiter(map(datetime.timestamp, map(_TS, lines)), dtype=np.float64, count=len(lines)),
            service=list(map(_SERVICE, lines)),
            span_id=cast(list[str], list(compress(spans, named))),  # those named
            message=list(map(_MESSAGE, lines)),
        )

    async def summary(self, *, incident: Incident, service: str | None) -> TracesData:
        data = trace_summary(self._spans, self._edges, incident=incident, service=service)
        key = (incident.onset, incident.window, incident.baseline)
        measured = self._measured.get(key)
        if measured is None:  # once per incident: a summary of one service is the whole, filtered
            measured = self._measured[key] = (
                call_gaps(self._columns, incident=incident),
                step_shortfalls(self._columns, self._step_lines, incident=incident),
            )
        gaps, steps = measured
        if service is not None:
            gaps = [g for g in gaps if service in (g.caller, g.callee)]
        return data.model_copy(update={"call_gaps": gaps, "step_shortfalls": steps})
