"""Wrappers around readers (rate limit, recording), several instances of one kind, and the error
mapping at every adapter's boundary (complete: every exception class the clients define has a row)."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
from datetime import UTC, datetime

import elastic_transport
import elasticsearch
import httpx
import prometheus_api_client.exceptions
import pytest
import requests

from adapters.boundary import HTTPX_ERRORS, ErrorTable, error_text, mapped_by, status_error, translate
from adapters.changes_git import reader as changes_git
from adapters.elasticsearch import reader as es_adapter
from adapters.prometheus import reader as prometheus
from adapters.wrappers import RateLimiter, Recorder, rate_limited, recorded
from opsagent.catalog import default_catalog
from opsagent.errors import (
    MalformedResponse,
    QueryRejected,
    SourceAuthFailed,
    SourceError,
    SourceTimeout,
    SourceUnavailable,
)
from opsagent.fixtures import Change, Edge, LogRecord, MetricSeries, Span
from opsagent.sources.live import LiveMetrics, MetricsFanOut, TracesFanOut
from opsagent.sources.queries import LogBatch
from tests.fakes import incident


def _exceptions(*modules: object) -> list[type[BaseException]]:
    found: set[type[BaseException]] = set()
    for module in modules:
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and not issubclass(obj, Warning):
                found.add(obj)
    return sorted(found, key=lambda c: c.__qualname__)


@pytest.mark.parametrize(
    ("table", "modules"),
    [
        (prometheus.ERRORS, (requests.exceptions, prometheus_api_client.exceptions)),
        (es_adapter.ERRORS, (elasticsearch.exceptions, elastic_transport)),
        (HTTPX_ERRORS, (httpx,)),
        (changes_git.ERRORS, (subprocess,)),
    ],
    ids=["requests", "elasticsearch", "httpx", "subprocess"],
)
def test_every_client_exception_has_a_row(table: ErrorTable, modules: tuple[object, ...]) -> None:
    unmapped = [cls.__qualname__ for cls in _exceptions(*modules) if mapped_by(cls, table) is None]
    assert unmapped == []


def test_timeouts_stay_timeouts_and_bad_answers_are_malformed() -> None:
    assert mapped_by(requests.exceptions.ReadTimeout, prometheus.ERRORS) is SourceTimeout
    assert mapped_by(requests.exceptions.ConnectTimeout, prometheus.ERRORS) is SourceTimeout
    assert mapped_by(requests.exceptions.JSONDecodeError, prometheus.ERRORS) is MalformedResponse
    assert mapped_by(requests.exceptions.SSLError, prometheus.ERRORS) is SourceUnavailable
    assert mapped_by(elastic_transport.ConnectionTimeout, es_adapter.ERRORS) is SourceTimeout
    assert mapped_by(elastic_transport.TlsError, es_adapter.ERRORS) is SourceUnavailable
    assert mapped_by(elastic_transport.SerializationError, es_adapter.ERRORS) is MalformedResponse
    for timeout in (httpx.ReadTimeout, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.WriteTimeout):
        assert mapped_by(timeout, HTTPX_ERRORS) is SourceTimeout
    assert mapped_by(httpx.DecodingError, HTTPX_ERRORS) is MalformedResponse
    assert mapped_by(subprocess.TimeoutExpired, changes_git.ERRORS) is SourceTimeout
    assert mapped_by(FileNotFoundError, changes_git.ERRORS) is SourceUnavailable


def test_http_statuses_and_error_bodies() -> None:
    assert status_error(400) is QueryRejected and status_error(422) is QueryRejected
    assert status_error(401) is SourceAuthFailed and status_error(403) is SourceAuthFailed
    assert status_error(504) is SourceTimeout
    assert (
        status_error(404) is SourceUnavailable
        and status_error(429) is SourceUnavailable
        and status_error(502) is SourceUnavailable
    )
    assert (
        error_text(b'{"status":"error","errorType":"bad_data","error":"parse error at char 5"}')
        == "bad_data: parse error at char 5"
    )
    assert error_text({"errors": [{"code": 400, "msg": "bad service"}]}) == "bad service"
    assert error_text("plain text\n") == "plain text"
    err = translate(ValueError("x"), HTTPX_ERRORS, source="traces:j", query="q", window=None)
    assert isinstance(err, MalformedResponse) and err.source == "traces:j" and err.query == "q"
    assert type(translate(RuntimeError("?"), HTTPX_ERRORS, source="s")) is SourceError


class _Series:
    name = "metrics:a"

    def __init__(self, value: float, *, fail: bool = False) -> None:
        self.value, self.fail, self.calls = value, fail, 0

    async def series(self, *, query: str, start: float, end: float) -> list[MetricSeries]:
        self.calls += 1
        if self.fail:
            raise SourceUnavailable("refused", source=self.name)
        return [MetricSeries(labels={"__name__": "up", "service": "checkout"}, samples=[(start, self.value)])]

    async def everything(self, *, start: float, end: float) -> list[MetricSeries]:
        return await self.series(query="", start=start, end=end)


def test_rate_limiter_spaces_reads_after_the_burst() -> None:
    now = [0.0]
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    limiter = RateLimiter(rate=2, burst=2, clock=lambda: now[0], sleep=sleep)
    inner = _Series(1.0)
    reader = rate_limited(inner, limiter)

    async def five() -> None:
        for _ in range(5):
            await reader.series(query="up", start=0, end=60)

    asyncio.run(five())
    assert inner.calls == 5 and slept == [0.5, 0.5, 0.5] and limiter.waited_s == 1.5


def test_recorder_keeps_each_record_once() -> None:
    recorder = Recorder()
    reader = recorded(_Series(1.0), recorder)
    asyncio.run(reader.series(query='up{service="checkout"}', start=0, end=60))
    asyncio.run(reader.series(query='up{service="checkout"}', start=60, end=120))
    assert list(recorder.series.values()) == [{0: 1.0, 60: 1.0}]
    ts = datetime(2026, 1, 1, tzinfo=UTC)
    log = LogRecord(ts=ts, service="a", level="info", message="m")
    recorder.take("records", {}, LogBatch(records=[log, log], complete=True))
    change = Change(id="c1", ts=ts, service="a", kind="deploy", summary="s")
    span = Span(trace_id="t", span_id="s", parent_id=None, service="a", operation="op", start=1, duration_us=1)
    recorder.take("changes", {}, [change, change])
    recorder.take("spans", {}, [span, span])
    recorder.take("edges", {}, [Edge(caller="a", callee="b")])
    assert len(recorder.logs) == len(recorder.changes) == len(recorder.spans) == 1 and recorder.edges == {("a", "b")}


def test_two_prometheus_read_as_one_and_a_dead_one_is_skipped() -> None:
    a, b, dead = _Series(1.0), _Series(2.0), _Series(3.0, fail=True)
    a.name, b.name, dead.name = "metrics:a", "metrics:b", "metrics:c"
    fan = MetricsFanOut([a, dead])
    assert fan.name == "metrics:a+c"
    # An HA pair holds the same series: it counts once.
    assert len(asyncio.run(MetricsFanOut([a, b]).series(query="up", start=0, end=60))) == 1
    assert asyncio.run(fan.series(query="up", start=0, end=60))[0].samples == [(0.0, 1.0)]
    with pytest.raises(SourceUnavailable):
        asyncio.run(MetricsFanOut([dead]).series(query="up", start=0, end=60))
    stats = asyncio.run(LiveMetrics(fan, catalog=default_catalog()).scan(incident=incident()))
    assert [s.component for s in stats] == ["checkout"]


def test_traces_fan_out_merges_spans_and_edges() -> None:
    span = Span(trace_id="t", span_id="s", parent_id=None, service="a", operation="op", start=1, duration_us=1)

    class _Traces:
        def __init__(self, name: str) -> None:
            self.name = name

        async def spans(self, **kw: object) -> list[Span]:
            return [span]

        async def edges(self, **kw: object) -> list[Edge]:
            return [Edge(caller="a", callee="b", source="traces")]

    fan = TracesFanOut([_Traces("traces:j"), _Traces("traces:t")])
    now = datetime.now(UTC)
    assert asyncio.run(fan.spans(services=None, start=now, end=now)) == [span]
    assert asyncio.run(fan.edges(start=now, end=now)) == [Edge(caller="a", callee="b", source="traces")]
