"""Readers: the protocols of the backends live telemetry is read from.

A live source (:mod:`opsagent.sources.live`) implements one of the engine's source protocols
(:mod:`opsagent.sources`) over a reader. Readers raise only :mod:`opsagent.errors` source errors:
foreign exceptions are translated at the adapter's boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from opsagent.fixtures import Change, Edge, KubeKind, KubeObject, MetricSeries, Span
from opsagent.sources.queries import LogBatch, LogQuery

# A live source is the replay computation over raw records a *reader* fetches from a real system
# (opsagent.sources.live). Each backend (Prometheus, Elasticsearch, Loki, git, a change feed, Jaeger, Tempo,
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
