"""The Jaeger and Tempo trace adapters, with respx against their APIs' request and response shapes
(see tests/fake_traces.py for the documentation each follows), compared with the replay source."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import respx

from adapters.jaeger.reader import JaegerReader
from adapters.tempo.reader import TempoReader
from opsagent.errors import MalformedResponse, QueryRejected, SourceTimeout, SourceUnavailable
from opsagent.fixtures import Recording, Span, load, stream, telemetry_file
from opsagent.incident import open_incident
from opsagent.models import Incident, TracesData
from opsagent.sources.live import LiveTraces
from opsagent.sources.replay import ReplayTraces
from tests.conftest import ORDER_INCIDENT
from tests.fake_traces import FakeJaeger, FakeTempo

JAEGER, TEMPO = "http://jaeger.test:16686", "http://tempo.test:3200"


@pytest.fixture(scope="module")
def recording() -> Recording:
    rec, _ = load(ORDER_INCIDENT)
    return rec


@pytest.fixture
def router() -> Iterator[respx.Router]:
    with respx.mock(assert_all_called=False) as mock:
        yield mock


def _incident(rec: Recording) -> Incident:
    return open_incident(rec.alert, window=rec.window, baseline=rec.baseline, id=rec.slug)


def _close(a: Any, b: Any, path: str = "") -> None:
    """Equal, floats within 1e-6 relative (span times cross microsecond integers on the way)."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-3), path
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def _spans() -> list[Span]:
    """The recording's spans as records (a recording holds them as columns), to serve as Jaeger would."""
    path = telemetry_file(ORDER_INCIDENT, "traces")
    assert path is not None
    return list(stream(path, "traces"))


def _live(reader: JaegerReader | TempoReader, incident: Incident, service: str | None) -> TracesData:
    async def go() -> TracesData:
        try:
            return await LiveTraces(reader).summary(incident=incident, service=service)
        finally:
            await reader.client.aclose()

    return asyncio.run(go())


def _jaeger(**kw: Any) -> JaegerReader:
    return JaegerReader(httpx.AsyncClient(base_url=JAEGER), name="jaeger", max_traces=10_000, **kw)


@pytest.mark.parametrize("service", [None, "order-service"])
def test_jaeger_summary_matches_replay(router: respx.Router, recording: Recording, service: str | None) -> None:
    fake = FakeJaeger(_spans())
    fake.install(router, JAEGER)
    incident = _incident(recording)
    got = _live(_jaeger(), incident, service)
    want = asyncio.run(ReplayTraces(recording).summary(incident=incident, service=service))
    _close(got.model_dump(), want.model_dump())
    assert got.services and {m for m, _ in fake.requests} == {"GET"}
    assert {p for _, p in fake.requests} <= {"/api/services", "/api/traces", "/api/dependencies"}


def test_jaeger_topology_matches_replay(router: respx.Router, recording: Recording) -> None:
    FakeJaeger(_spans()).install(router, JAEGER)
    incident = _incident(recording)
    got = asyncio.run(LiveTraces(_jaeger()).topology(incident=incident))
    assert got == asyncio.run(ReplayTraces(recording).topology(incident=incident))


def test_tempo_summary_matches_replay(router: respx.Router, recording: Recording) -> None:
    fake = FakeTempo(_spans())
    fake.install(router, TEMPO)
    incident = _incident(recording)
    reader = TempoReader(httpx.AsyncClient(base_url=TEMPO), name="tempo", max_traces=10_000)
    got = _live(reader, incident, None)
    want = asyncio.run(ReplayTraces(recording).summary(incident=incident, service=None))
    _close(got.model_dump(), want.model_dump())
    assert {m for m, _ in fake.requests} == {"GET"}


def test_tempo_reads_at_most_the_cap_and_skips_aged_out_traces(router: respx.Router, recording: Recording) -> None:
    fake = FakeTempo(_spans())
    router.get(url__regex=rf"{TEMPO}/api/traces/{_spans()[0].trace_id}$").mock(
        return_value=httpx.Response(404, text="trace not found")
    )
    fake.install(router, TEMPO)
    incident = _incident(recording)
    reader = TempoReader(httpx.AsyncClient(base_url=TEMPO), name="tempo", max_traces=5)
    spans = asyncio.run(reader.spans(services=None, start=incident.window.start, end=incident.window.end))
    assert 0 < len({s.trace_id for s in spans}) <= 5


def test_jaeger_error_body_is_a_rejected_query(router: respx.Router, recording: Recording) -> None:
    router.get(f"{JAEGER}/api/traces").mock(
        return_value=httpx.Response(
            400,
            json={
                "data": None,
                "total": 0,
                "limit": 0,
                "offset": 0,
                "errors": [{"code": 400, "msg": "cannot parse minDuration"}],
            },
        )
    )
    incident = _incident(recording)
    reader = _jaeger()
    with pytest.raises(QueryRejected, match="cannot parse minDuration") as caught:
        asyncio.run(
            reader.traces("order-service", start=incident.window.start, end=incident.window.end, min_duration="x")
        )
    assert caught.value.source == "traces:jaeger" and caught.value.window == (
        incident.window.start,
        incident.window.end,
    )


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (httpx.Response(503, text="upstream connect error"), SourceUnavailable),
        (httpx.ReadTimeout("slow"), SourceTimeout),
        (httpx.ConnectError("refused"), SourceUnavailable),
        (httpx.Response(200, text="<html>login</html>"), MalformedResponse),
        (
            httpx.Response(200, json={"data": [{"traceID": "t", "spans": [{"spanID": "s"}]}], "errors": None}),
            MalformedResponse,
        ),
    ],
)
def test_jaeger_failures_are_mapped(
    router: respx.Router, recording: Recording, response: Any, error: type[Exception]
) -> None:
    route = router.get(f"{JAEGER}/api/traces")
    if isinstance(response, Exception):
        route.mock(side_effect=response)
    else:
        route.mock(return_value=response)
    incident = _incident(recording)
    with pytest.raises(error):
        asyncio.run(_jaeger().spans(services=["order-service"], start=incident.window.start, end=incident.window.end))


def test_empty_traces(router: respx.Router, recording: Recording) -> None:
    FakeJaeger([]).install(router, JAEGER)
    got = _live(_jaeger(), _incident(recording), None)
    assert got.services == [] and got.slowest_operations == [] and got.error_spans == {}
