"""Cross-cutting behaviour around a reader, as wrappers rather than flags on it.

:func:`rate_limited` makes every read wait for a token of a :class:`RateLimiter` (a token bucket,
clock and sleep injectable); :func:`recorded` hands every answer to a :class:`Recorder`, which keeps
the raw telemetry read so ``opsagent record`` can write it as a recorded incident. (The per-call
timeout, the cache of identical calls and the translation of errors into observations are the tool
layer's, :class:`opsagent.tools.Toolbox`, around the sources built over these readers.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from opsagent.fixtures import Change, Edge, KubeKind, KubeObject, LogRecord, MetricSeries, Span
from opsagent.sources.queries import EXPRESSION_NAME, LogBatch, LogQuery

#: The label a recorded expression result carries its query under.
QUERY_LABEL = "__query__"
Before = Callable[[], Awaitable[None]]
After = Callable[[str, dict[str, Any], object], None]


class RateLimiter:
    """A token bucket: ``rate`` reads a second on average, ``burst`` at once."""

    def __init__(
        self,
        *,
        rate: float,
        burst: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.burst = float(burst if burst is not None else max(1, round(rate)))
        self.clock = clock
        self.sleep = sleep
        self._tokens = self.burst
        self._stamp = clock()
        self._lock = asyncio.Lock()
        self.waited_s = 0.0

    async def acquire(self) -> None:
        async with self._lock:
            now = self.clock()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            if self._tokens < 1:
                wait = (1 - self._tokens) / self.rate
                self.waited_s += wait
                await self.sleep(wait)
                self._tokens = 1.0
                self._stamp = self.clock()
            self._tokens -= 1


class WrappedReader:
    """A reader of any kind, each read passing ``before`` first and its answer going to ``after``.

    It has the methods of every reader protocol; only those of the wrapped reader's kind are ever
    called (a live source of one kind calls its own reader's methods)."""

    def __init__(self, inner: Any, *, before: Before | None = None, after: After | None = None) -> None:
        self.inner = inner
        self.name: str = inner.name
        self._before = before
        self._after = after

    async def _through(self, method: str, **args: Any) -> Any:
        if self._before is not None:
            await self._before()
        answer = await getattr(self.inner, method)(**args)
        if self._after is not None:
            self._after(method, args, answer)
        return answer

    async def series(self, *, query: str, start: float, end: float) -> list[MetricSeries]:
        out: list[MetricSeries] = await self._through("series", query=query, start=start, end=end)
        return out

    async def everything(self, *, start: float, end: float) -> list[MetricSeries]:
        out: list[MetricSeries] = await self._through("everything", start=start, end=end)
        return out

    async def records(self, *, query: LogQuery) -> LogBatch:
        out: LogBatch = await self._through("records", query=query)
        return out

    async def changes(self, *, start: datetime, end: datetime, service: str | None) -> list[Change]:
        out: list[Change] = await self._through("changes", start=start, end=end, service=service)
        return out

    async def spans(self, *, services: Sequence[str] | None, start: datetime, end: datetime) -> list[Span]:
        out: list[Span] = await self._through("spans", services=services, start=start, end=end)
        return out

    async def edges(self, *, start: datetime, end: datetime) -> list[Edge]:
        out: list[Edge] = await self._through("edges", start=start, end=end)
        return out

    async def objects(self, *, kind: KubeKind) -> list[KubeObject]:
        out: list[KubeObject] = await self._through("objects", kind=kind)
        return out


def rate_limited(reader: Any, limiter: RateLimiter) -> WrappedReader:
    return WrappedReader(reader, before=limiter.acquire)


def recorded(reader: Any, recorder: Recorder) -> WrappedReader:
    return WrappedReader(reader, after=recorder.take)


@dataclass
class Recorder:
    """The raw telemetry the readers returned, each record once (series merged sample by sample)."""

    #: series by label set; an expression result (no name of its own) also carries its query as
    #: ``__query__``, so two expressions' results stay apart and can be named later
    series: dict[tuple[tuple[str, str], ...], dict[float, float]] = field(default_factory=dict)
    logs: dict[tuple[str, str, str, str], LogRecord] = field(default_factory=dict)
    changes: dict[str, Change] = field(default_factory=dict)
    spans: dict[tuple[str, str], Span] = field(default_factory=dict)
    edges: set[tuple[str, str]] = field(default_factory=set)
    kubernetes: dict[tuple[str, str, str], KubeObject] = field(default_factory=dict)

    def take(self, method: str, args: dict[str, Any], answer: object) -> None:
        if isinstance(answer, LogBatch):
            for r in answer.records:
                self.logs.setdefault((r.ts.isoformat(), r.service, r.pod or "", r.message), r)
            return
        if not isinstance(answer, list):
            return
        for item in answer:
            if isinstance(item, MetricSeries):
                labels = dict(item.labels)
                if item.name == EXPRESSION_NAME:
                    labels[QUERY_LABEL] = str(args.get("query", ""))
                self.series.setdefault(tuple(sorted(labels.items())), {}).update(dict(item.samples))
            elif isinstance(item, Change):
                self.changes.setdefault(item.id, item)
            elif isinstance(item, Span):
                self.spans.setdefault((item.trace_id, item.span_id), item)
            elif isinstance(item, Edge):
                self.edges.add((item.caller, item.callee))
            elif isinstance(item, KubeObject):
                self.kubernetes.setdefault((item.kind, item.namespace, item.name), item)
