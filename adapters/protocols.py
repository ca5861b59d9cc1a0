"""The narrow protocols every data source implements, one per kind of telemetry.

Each method answers one read-only question about an incident and returns the observation data the
engine reasons over. Adapters raise only :mod:`opsagent.errors` source errors: foreign exceptions
are translated at the adapter's boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from adapters.readers import LogBatch, LogQuery
from opsagent.fixtures import Change, Edge, KubeKind, KubeObject, MetricSeries, SignalDef, Span
from opsagent.models import ChangesData, Incident, KubernetesData, LogsData, SeriesStats, TracesData


class MetricsSource(Protocol):
    name: str

    async def stats(
        self, *, query: str, signal: str, component: str, spec: SignalDef, incident: Incident
    ) -> SeriesStats | None:
        """Baseline-vs-window statistics of a query, or None when it matches no series."""

    async def scan(self, *, incident: Incident) -> list[SeriesStats]:
        """Statistics of every series there is, grouped by component and metric (for triage)."""


class LogsSource(Protocol):
    name: str

    async def summary(self, *, incident: Incident, service: str | None, text: str | None) -> LogsData:
        """A summary (never raw truncated text) of the logs of a service, or of all services."""


class ChangesSource(Protocol):
    name: str

    async def changes(self, *, incident: Incident, service: str | None, before_min: float) -> ChangesData:
        """Changes from ``before_min`` minutes before onset to the end of the window."""


class TracesSource(Protocol):
    name: str

    async def summary(self, *, incident: Incident, service: str | None) -> TracesData:
        """Per-service self-time shift, slowest operations, error spans, blocked parents."""

    async def topology(self, *, incident: Incident) -> list[Edge]:
        """Call edges seen in the traces (caller service -> callee service)."""


class KubernetesSource(Protocol):
    """What the cluster says (read-only): pods and their containers' states, events, nodes. Rollout
    history reaches the engine as changes, through :class:`ChangesSource`."""

    name: str

    async def pods(self, *, incident: Incident, service: str | None) -> KubernetesData:
        """A service's pods with their events and nodes; with no service, every workload counted and
        the troubled pods, warnings and node problems listed."""

    async def events(self, *, incident: Incident, service: str | None, reason: str | None) -> KubernetesData:
        """Events about a service's objects (or all), folded per object and reason."""

    async def nodes(self, *, incident: Incident, service: str | None) -> KubernetesData:
        """The nodes a service's pods run on (or all), their bad conditions and their events."""


# ---------------------------------------------------------------- readers: where live telemetry comes in
#
# A live source is the replay computation over raw records a *reader* fetches from a real system
# (adapters.live). Each backend (Prometheus, Elasticsearch, Loki, git, a change feed, Jaeger, Tempo,
# the Kubernetes API) is a reader; wrappers (rate limit, recording) wrap readers, and several readers
# of one kind read as one.
# Readers return the recorded-incident models, so what they read can be written as a fixture.


class MetricsReader(Protocol):
    name: str

    async def series(self, *, query: str, start: float, end: float) -> list[MetricSeries]:
        """The series a query returns over [start, end] (unix seconds), at the reader's resolution.

        A result with no metric name (an expression) is named ``EXPRESSION_NAME``."""

    async def everything(self, *, start: float, end: float) -> list[MetricSeries]:
        """Every series worth scanning in [start, end], within the reader's caps (for triage)."""


class LogsReader(Protocol):
    name: str

    async def records(self, *, query: LogQuery) -> LogBatch:
        """Log records of the query's ranges, and exact counts where the records are capped."""


class ChangesReader(Protocol):
    name: str

    async def changes(self, *, start: datetime, end: datetime, service: str | None) -> list[Change]:
        """Changes made in [start, end], of one service or all."""


class TracesReader(Protocol):
    name: str

    async def spans(self, *, services: Sequence[str] | None, start: datetime, end: datetime) -> list[Span]:
        """Whole traces (every span) that touch one of the services (or any) and start in [start, end)."""

    async def edges(self, *, start: datetime, end: datetime) -> list[Edge]:
        """Call edges (caller service -> callee service) seen in [start, end)."""


class KubernetesReader(Protocol):
    name: str

    async def objects(self, *, kind: KubeKind) -> list[KubeObject]:
        """Every object of a kind in the namespaces the reader reads, as the API serves it."""
