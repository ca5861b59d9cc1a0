"""What live readers exchange with the live sources, beside the recorded-incident models.

A reader returns raw telemetry as the fixture format's models (:class:`~opsagent.fixtures.MetricSeries`,
``LogRecord``, ``Change``, ``Span``); logs also carry exact counts, because a log store can count far
more lines than anyone should page through. Nothing here does I/O.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from opsagent.fixtures import LogRecord
from opsagent.models import TimeRange

#: The metric name given to a query result that has none (the value of an expression, not a series).
EXPRESSION_NAME = "opsagent:expression"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LogQuery(_Model):
    """The logs of one service (or all), optionally matching a text, in the baseline and the window
    (lines between the two, or outside both, are not asked for)."""

    service: str | None
    text: str | None
    baseline: TimeRange
    window: TimeRange
    bucket_s: int = Field(default=60, gt=0, description="width of the count buckets, aligned on the earliest start")

    @property
    def start(self) -> datetime:
        return min(self.baseline.start, self.window.start)

    @property
    def end(self) -> datetime:
        return max(self.baseline.end, self.window.end)


class LevelBucket(_Model):
    start: datetime
    levels: dict[str, int] = Field(description="lines by level as the store spells it")


class LogCounts(_Model):
    """Exact counts over the whole query, from the store's aggregations."""

    total: int
    window_by_level: dict[str, int] = Field(description="lines of the window, by level as stored")
    window_by_service: dict[str, int]
    buckets: list[LevelBucket] = Field(default_factory=list)


class LogBatch(_Model):
    records: list[LogRecord]
    counts: LogCounts | None = Field(default=None, description="exact counts; needed when records is not complete")
    complete: bool = Field(description="every matching line is in records")
