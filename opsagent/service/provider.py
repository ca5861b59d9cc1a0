"""Source providers: which data sources investigate an alert.

The service asks a :class:`SourceProvider` for a :class:`~opsagent.plan.Reading` per alert: the
sources, the signal catalog and topology of the environment the alert comes from, and optionally a
way to read raw series for the report page's charts; the worker's planner makes it a plan.
:class:`LiveProvider` reads the systems the settings configure
(Prometheus, Elasticsearch, git, Jaeger…), which is what production runs; :class:`FixtureProvider`
serves recorded incidents, which is what tests and demos use; :func:`provider_for` picks from the
settings. A provider runs inside a worker process, so it must pickle (hold configuration, not
connections) and build its sources there, per job; a reading's ``close`` releases them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import structlog
import yaml

from adapters.config import open_live_sources
from adapters.sourceconfig import SourcesConfig
from opsagent.analysis.series import as_rate
from opsagent.fixtures import Edge, MetricSeries, Recording, SignalDef, load, unix
from opsagent.incident import alert_services
from opsagent.models import Alert
from opsagent.plan import Reading, replay_reading
from opsagent.settings import Settings
from opsagent.sources.live import LiveMetrics
from opsagent.sources.replay import ReplayMetrics
from opsagent.stats import Sample, combine

log = structlog.get_logger("opsagent.service.provider")

#: An alert carrying this label names the recorded incident to replay.
FIXTURE_LABEL = "opsagent_fixture"


class SourceProvider(Protocol):
    name: str

    def reading(self, alert: Alert) -> Reading | None:
        """What to read for this alert, or None when this provider has no data for it."""


class NoSources:
    """Investigates with nothing to read: the report says which sources could not be read."""

    name = "none"

    def reading(self, alert: Alert) -> Reading | None:
        return None


def as_signal(found: Sequence[MetricSeries], spec: SignalDef) -> list[Sample]:
    """Series as one signal reads them: counters as increases (by the series' own type, else the
    spec's, else the name), combined across pods the way the spec says."""
    members = [as_rate(m, spec.type) for m in found]
    return combine(members, spec.agg) if members else []


class ReplaySeries:
    """Raw series of a recorded incident, combined across pods the way the signal's spec says."""

    def __init__(self, metrics: ReplayMetrics) -> None:
        self.metrics = metrics

    async def series(self, *, query: str, spec: SignalDef, start: datetime, end: datetime) -> list[Sample]:
        matched = self.metrics._select(self.metrics._parse(query))
        if not matched:
            return []
        lo, hi = unix(start), unix(end)
        return [(t, v) for t, v in as_signal([m for m, _, _ in matched], spec) if lo <= t <= hi]


class LiveSeries:
    """Raw series from the live metrics source (a range query), combined like :class:`ReplaySeries`."""

    def __init__(self, metrics: LiveMetrics) -> None:
        self.metrics = metrics

    async def series(self, *, query: str, spec: SignalDef, start: datetime, end: datetime) -> list[Sample]:
        return as_signal(await self.metrics.reader.series(query=query, start=unix(start), end=unix(end)), spec)


class LiveProvider:
    """The systems the settings' ``sources`` configure, read for every alert. Clients are opened per
    job (in the worker, on the job's event loop) and closed by the reading's ``close``; credentials
    are read from the worker's environment, which it inherits from the service."""

    name = "live"

    def __init__(self, sources: SourcesConfig, signals: dict[str, SignalDef] | None = None) -> None:
        self.sources = sources
        self.signals = signals or {}

    def reading(self, alert: Alert) -> Reading | None:
        live = open_live_sources(self.sources, signals=self.signals)
        metrics = live.sources.metrics
        return live.reading(alert, series=LiveSeries(metrics) if isinstance(metrics, LiveMetrics) else None)


class FirstMatch:
    """Asks each provider in turn; the first with data for the alert is read."""

    def __init__(self, providers: Sequence[SourceProvider]) -> None:
        self.providers = list(providers)
        self.name = "+".join(p.name for p in self.providers)

    def reading(self, alert: Alert) -> Reading | None:
        for provider in self.providers:
            reading = provider.reading(alert)
            if reading is not None:
                return reading
        return None


def provider_for(settings: Settings) -> SourceProvider:
    """Recorded incidents first when ``fixtures_dir`` is set (an alert naming one replays it), then
    the configured live sources; with neither, investigations say that nothing could be read."""
    providers: list[SourceProvider] = []
    if settings.fixtures_dir is not None:
        providers.append(FixtureProvider(settings.fixtures_dir))
    if not settings.sources.empty():
        providers.append(LiveProvider(settings.sources, settings.signals))
    if not providers:
        return NoSources()
    return providers[0] if len(providers) == 1 else FirstMatch(providers)


def known_topology(provider: SourceProvider) -> list[Edge]:
    """The call edges a provider knows before any investigation: the recorded incidents' topologies
    (what the webhook correlates alerts with, beside the configured ones); none for live sources,
    whose graph comes from traces as each investigation reads them."""
    if isinstance(provider, FixtureProvider):
        return provider.topology()
    if isinstance(provider, FirstMatch):
        return [e for p in provider.providers for e in known_topology(p)]
    return []


@dataclass(frozen=True)
class _Entry:
    slug: str
    alertname: str
    services: tuple[str, ...]
    topology: tuple[Edge, ...] = ()


class FixtureProvider:
    """Recorded incidents from a directory, matched to an alert by its ``opsagent_fixture`` label,
    or else by alertname and service. Headers are indexed once; telemetry is loaded on first use
    and kept (one worker process replays the same incident many times)."""

    name = "fixtures"

    def __init__(self, directory: Path, *, label: str = FIXTURE_LABEL, cache_size: int = 4) -> None:
        self.directory = directory
        self.label = label
        self.cache_size = cache_size
        self._index: dict[str, _Entry] | None = None
        self._cache: dict[str, Recording] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_index": None, "_cache": {}}

    def index(self) -> dict[str, _Entry]:
        if self._index is None:
            found: dict[str, _Entry] = {}
            for header in sorted(self.directory.glob("*/incident.yaml")):
                try:
                    raw = yaml.safe_load(header.read_text(encoding="utf-8"))
                    alert = Alert.model_validate(raw["alert"])
                    edges = tuple(Edge.model_validate(e) for e in raw.get("topology") or [])
                except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
                    log.warning("provider.fixture_skipped", path=str(header), error=str(exc))
                    continue
                slug = header.parent.name
                found[slug] = _Entry(slug, alert.labels.get("alertname", ""), alert_services(alert), edges)
            self._index = found
        return self._index

    def topology(self) -> list[Edge]:
        """Every recorded incident's call edges, once each."""
        seen = {(e.caller, e.callee): e for entry in self.index().values() for e in entry.topology}
        return [seen[k] for k in sorted(seen)]

    def match(self, alert: Alert) -> str | None:
        index = self.index()
        named = alert.labels.get(self.label)
        if named is not None:
            return named if named in index else None  # a label names an indexed slug, never a path
        alertname = alert.labels.get("alertname", "")
        service = alert_services(alert)[0]
        for entry in index.values():
            if entry.alertname == alertname and service in entry.services:
                return entry.slug
        return None

    def recording(self, slug: str) -> Recording:
        if slug not in self._cache:
            if len(self._cache) >= self.cache_size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[slug] = load(self.directory / slug)[0]
        return self._cache[slug]

    def reading(self, alert: Alert) -> Reading | None:
        slug = self.match(alert)
        if slug is None:
            return None
        reading = replay_reading(self.recording(slug))  # as the CLI and replay read it: discovery included
        metrics = reading.sources.metrics
        return replace(reading, series=ReplaySeries(metrics) if isinstance(metrics, ReplayMetrics) else None)
