"""The narrow protocols every data source implements, one per kind of telemetry.

Each method answers one read-only question about an incident and returns the observation data the
engine reasons over. Adapters raise only :mod:`opsagent.errors` source errors: foreign exceptions
are translated at the adapter's boundary.
"""

from __future__ import annotations

from typing import Protocol

from opsagent.fixtures import Edge, SignalDef
from opsagent.models import ChangesData, Incident, LogsData, SeriesStats, TracesData


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
