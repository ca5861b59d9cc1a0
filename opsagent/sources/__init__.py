"""The engine's side of every data source: one narrow protocol per kind of telemetry, and the set
of sources an investigation reads.

Each method answers one read-only question about an incident and returns the observation data the
engine reasons over. The implementations are in this package and compute, they do not fetch: the
replay sources from a recording (:mod:`opsagent.sources.replay`), the live sources over readers of
real systems (:mod:`opsagent.sources.live`, with the reader protocols of
:mod:`opsagent.sources.readers` and what readers exchange, :mod:`opsagent.sources.queries`), and the
Kubernetes source over one read of a cluster (:mod:`opsagent.sources.kubernetes`). The readers that
talk to systems are in :mod:`adapters`. Sources raise only :mod:`opsagent.errors` source errors:
foreign exceptions are translated at the adapter's boundary. The engine reaches a data source
through these protocols alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from opsagent.fixtures import Edge, SignalDef
from opsagent.models import (
    SOURCE_KINDS,
    ChangeRecord,
    ChangesData,
    Incident,
    KubernetesData,
    LogsData,
    SeriesStats,
    SourceKind,
    TracesData,
    VersionsData,
)


class MetricsSource(Protocol):
    name: str

    async def stats(
        self, *, query: str, signal: str, component: str, spec: SignalDef, incident: Incident
    ) -> SeriesStats | None:
        """Baseline-vs-window statistics of a query, or None when it matches no series."""

    async def scan(self, *, incident: Incident) -> list[SeriesStats]:
        """Statistics of every series there is, grouped by component and metric (for triage)."""

    async def versions(self, *, incident: Incident, service: str, rollout: ChangeRecord | None = None) -> VersionsData:
        """The service's new version's pods against its old version's, where series carry versions or
        ``rollout`` (the service's rollout, when a change source knows it) names the pods of each."""


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


@dataclass
class Sources:
    metrics: MetricsSource | None = None
    logs: LogsSource | None = None
    changes: ChangesSource | None = None
    traces: TracesSource | None = None
    kubernetes: KubernetesSource | None = None

    def kinds(self) -> set[SourceKind]:
        return {k for k in SOURCE_KINDS if getattr(self, k.value)}
