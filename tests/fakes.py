"""Test doubles for the source protocols: in-memory answers, failures and hangs."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from opsagent.errors import SourceUnavailable
from opsagent.fixtures import Edge, SignalDef
from opsagent.incident import open_incident
from opsagent.models import (
    Alert,
    ChangesData,
    Incident,
    LogsData,
    SeriesStats,
    TimeRange,
    TracesData,
)

ONSET = datetime(2026, 3, 1, 14, 2, tzinfo=UTC)


def alert(service: str = "checkout") -> Alert:
    return Alert.model_validate(
        {"labels": {"alertname": "HighLatency", "service": service}, "startsAt": ONSET.isoformat()}
    )


def incident(service: str = "checkout") -> Incident:
    return open_incident(
        alert(service),
        window=TimeRange(start=datetime(2026, 3, 1, 13, 0, tzinfo=UTC), end=datetime(2026, 3, 1, 14, 30, tzinfo=UTC)),
        id="inc-test",
    )


def stats(signal: str, component: str, *, base: float, window: float, limit: float | None = None) -> SeriesStats:
    ratio = window / base
    direction = "up" if ratio > 1.3 else "down" if ratio < 0.77 else "flat"
    return SeriesStats(
        signal=signal,
        component=component,
        query=f"{signal}{{service='{component}'}}",
        unit=None,
        series=1,
        baseline_mean=base,
        baseline_std=base * 0.05,
        window_mean=window,
        window_max=window,
        peak_ratio=ratio,
        mean_ratio=ratio,
        z_score=(window - base) / (base * 0.05),
        change_point=ONSET,
        limit=limit,
        limit_fraction=window / limit if limit else None,
        direction=direction,  # type: ignore[arg-type]
    )


class FakeMetrics:
    name = "metrics:fake"

    def __init__(self, table: dict[tuple[str, str], SeriesStats]) -> None:
        self.table = table
        self.calls = 0

    async def stats(
        self, *, query: str, signal: str, component: str, spec: SignalDef, incident: Incident
    ) -> SeriesStats | None:
        self.calls += 1
        return self.table.get((signal, component))

    async def scan(self, *, incident: Incident) -> list[SeriesStats]:
        self.calls += 1
        return list(self.table.values())


class DeadLogs:
    name = "logs:dead"

    async def summary(self, *, incident: Incident, service: str | None, text: str | None) -> LogsData:
        raise SourceUnavailable("connection refused", source=self.name)


class BuggyChanges:
    name = "changes:buggy"

    async def changes(self, *, incident: Incident, service: str | None, before_min: float) -> ChangesData:
        raise KeyError("oops")


class HangingTraces:
    name = "traces:hanging"

    async def summary(self, *, incident: Incident, service: str | None) -> TracesData:
        await asyncio.sleep(30)
        raise AssertionError("unreachable")

    async def topology(self, *, incident: Incident) -> list[Edge]:
        return []
