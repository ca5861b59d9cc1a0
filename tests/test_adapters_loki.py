"""The Loki logs adapter, with respx in Loki's real answer shapes (tests/fake_loki.py cites the API
reference for each): the same summary as replay, exact counts past the cap, tenant and auth, errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta

import httpx
import pytest
import respx

from adapters.config import open_live_sources, reader_for
from adapters.loki.config import LokiConfig, LokiLabels
from adapters.loki.reader import LokiReader
from adapters.sourceconfig import SourcesConfig
from opsagent.doctor import check
from opsagent.errors import AnswerTooLarge, MalformedResponse, QueryRejected, SourceAuthFailed, SourceTimeout
from opsagent.fixtures import LogRecord, Recording, load
from opsagent.incident import open_incident
from opsagent.logsummary import SimpleSummariser
from opsagent.models import Incident, LogsData
from opsagent.sources.live import LiveLogs
from opsagent.sources.queries import LogQuery
from opsagent.sources.replay import ReplayLogs
from tests.conftest import ORDER_INCIDENT
from tests.fake_loki import FakeLoki

URL = "http://loki.test:3100"


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


def _reader(**kw: object) -> LokiReader:
    return LokiReader(httpx.AsyncClient(base_url=URL), name="loki", **kw)  # type: ignore[arg-type]


def _summary(reader: LokiReader, incident: Incident, service: str | None, text: str | None = None) -> LogsData:
    async def go() -> LogsData:
        try:
            return await LiveLogs(reader, summariser=SimpleSummariser()).summary(
                incident=incident, service=service, text=text
            )
        finally:
            await reader.client.aclose()

    return asyncio.run(go())


def _replay(rec: Recording, incident: Incident, service: str | None, text: str | None = None) -> LogsData:
    return asyncio.run(ReplayLogs(rec, SimpleSummariser()).summary(incident=incident, service=service, text=text))


@pytest.mark.parametrize("service", ["order-service", None])
def test_summary_matches_replay_when_every_line_is_read(
    router: respx.Router, recording: Recording, service: str | None
) -> None:
    fake = FakeLoki(recording.logs)
    fake.install(router, URL)
    incident = _incident(recording)
    got = _summary(_reader(max_lines=100_000, page_size=5_000), incident, service)
    want = _replay(recording, incident, service)
    assert got == want.model_copy(update={"outside_range": got.outside_range})
    assert {(r.method, r.url.path) for r in fake.requests} == {("GET", "/loki/api/v1/query_range")}
    selector = fake.requests[0].url.params["query"]
    assert selector == ('{service_name="order-service"}' if service else '{service_name=~".+"}')


def test_capped_read_keeps_exact_counts_from_metric_queries(router: respx.Router, recording: Recording) -> None:
    fake = FakeLoki(recording.logs)
    fake.install(router, URL)
    incident = _incident(recording)
    got = _summary(_reader(max_lines=1_000, page_size=300), incident, None)
    want = _replay(recording, incident, None)
    assert got.estimated and not want.estimated
    assert got.total == want.total
    assert got.by_service == want.by_service
    assert got.by_level == want.by_level
    assert got.histogram == want.histogram and got.error_histogram == want.error_histogram
    pages = [r for r in fake.requests if r.url.path.endswith("query_range") and "step" not in r.url.params]
    assert all(int(r.url.params["limit"]) <= 300 for r in pages) and len(pages) >= 4
    counted = [r.url.params["query"] for r in fake.requests if r.url.path.endswith("/query")]
    assert 'sum by (detected_level) (count_over_time({service_name=~".+"} [' in counted[0]


def test_lines_at_one_nanosecond_across_a_page_boundary_are_read_once(
    router: respx.Router, recording: Recording
) -> None:
    at = recording.window.start + timedelta(minutes=1)
    burst = [LogRecord(ts=at, service="api", level="error", message=f"boom {i}") for i in range(7)]
    later = [LogRecord(ts=at + timedelta(seconds=1), service="api", level="info", message="ok")]
    fake = FakeLoki([*burst, *later])
    fake.install(router, URL)
    reader = _reader(max_lines=100, page_size=4)
    incident = _incident(recording).model_copy(update={"baseline": recording.window, "window": recording.window})

    async def go() -> list[LogRecord]:
        try:
            batch = await reader.records(
                query=LogQuery(service="api", text=None, baseline=incident.baseline, window=incident.window)
            )
            return batch.records
        finally:
            await reader.client.aclose()

    lines = asyncio.run(go())
    # the baseline and the window are the same range here: each line is read once per range
    messages = [r.message for r in lines]
    assert sorted(messages) == sorted([*(f"boom {i}" for i in range(7)), "ok"] * 2)


def test_text_is_a_case_insensitive_line_filter_and_a_parser_stage_when_configured(
    router: respx.Router, recording: Recording
) -> None:
    fake = FakeLoki(recording.logs)
    fake.install(router, URL)
    incident = _incident(recording)
    got = _summary(_reader(selector='namespace="prod"'), incident, "order-service", text="Timeout")
    want = _replay(recording, incident, "order-service", text="Timeout")
    assert got.total == want.total > 0
    query = fake.requests[0].url.params["query"]
    assert query == '{namespace="prod", service_name="order-service"} |~ "(?i)Timeout"'
    parsed = _reader(parser="json", labels=LokiLabels(level="level"))
    odd = LogQuery(service='we"ird', text=None, baseline=incident.baseline, window=incident.window)
    assert parsed.log_query(odd) == '{service_name="we\\"ird"} | json'


def test_tenant_and_bearer_token_come_from_the_config_and_the_environment(
    router: respx.Router, recording: Recording
) -> None:
    fake = FakeLoki(recording.logs)
    fake.install(router, URL)
    config = SourcesConfig.model_validate(
        {"loki": [{"name": "main", "url": URL, "tenant": "team-checkout", "auth": "bearer"}]}
    )
    incident = _incident(recording)

    async def go() -> LogsData:
        async with open_live_sources(config, environ={"OPSAGENT_LOKI_MAIN_TOKEN": "s3cret"}) as live:
            assert live.sources.logs is not None
            return await live.sources.logs.summary(incident=incident, service="order-service", text=None)

    data = asyncio.run(go())
    assert data.total > 0
    assert {r.headers["x-scope-orgid"] for r in fake.requests} == {"team-checkout"}
    assert {r.headers["authorization"] for r in fake.requests} == {"Bearer s3cret"}


def test_a_selector_with_braces_is_refused_with_what_to_write() -> None:
    with pytest.raises(ValueError, match="without braces"):
        LokiConfig(name="x", url=URL, selector='{namespace="prod"}')


def test_errors_become_the_projects_errors(router: respx.Router, recording: Recording) -> None:
    fake = FakeLoki(recording.logs)
    fake.install(router, URL)
    incident = _incident(recording)
    cases = [
        (httpx.Response(400, text="parse error at line 1, col 18: syntax error: unexpected IDENTIFIER"), QueryRejected),
        (httpx.Response(401, text="no org id"), SourceAuthFailed),
        (httpx.Response(200, text="<html>a proxy login page</html>"), MalformedResponse),
        (httpx.Response(200, json={"status": "error", "data": {}}), MalformedResponse),
        # the right envelope, a result of the wrong shape: said as such, not as a KeyError
        (
            httpx.Response(
                200, json={"status": "success", "data": {"resultType": "streams", "result": [{"values": [["1", "x"]]}]}}
            ),
            MalformedResponse,
        ),
    ]
    messages = []
    for response, error in cases:
        fake.fail = response
        with pytest.raises(error) as raised:
            _summary(_reader(), incident, "order-service")
        assert raised.value.source == "logs:loki"
        messages.append(str(raised.value))
    assert "parse error at line 1, col 18" in messages[0]  # Loki's own words reach the reasoner
    assert messages[-1].startswith("not a Loki streams answer (no field 'stream')"), messages[-1]
    fake.fail = None
    router.routes.clear()
    router.route(host="loki.test").mock(side_effect=httpx.ReadTimeout("slow"))
    with pytest.raises(SourceTimeout):
        _summary(_reader(), incident, "order-service")


def test_doctor_reads_lokis_version(router: respx.Router, recording: Recording) -> None:
    FakeLoki(recording.logs).install(router, URL)
    health = asyncio.run(check(LokiConfig(name="main", url=URL), environ={}))
    assert health.reachable and health.version == "3.4.2"
    assert isinstance(reader_for(LokiConfig(name="main", url=URL), {}), LokiReader)


def test_doctor_tells_an_upstream_that_answered_500_from_one_that_cannot_be_reached(router: respx.Router) -> None:
    router.route(host="loki.test").mock(return_value=httpx.Response(500, text="ingester unavailable"))
    failing = asyncio.run(check(LokiConfig(name="main", url=URL), environ={}))
    assert failing.reachable and not failing.ok
    assert "HTTP 500" in failing.problems[0] and "answered HTTP 500" in failing.fixes[0]
    router.routes.clear()
    router.route(host="loki.test").mock(side_effect=httpx.ConnectError("connection refused"))
    gone = asyncio.run(check(LokiConfig(name="main", url=URL), environ={}))
    assert not gone.reachable and "cannot reach" in gone.fixes[0]


def test_an_answer_of_200_mb_is_stopped_at_the_size_cap_as_it_streams_in(recording: Recording) -> None:
    sent = {"bytes": 0}

    class Huge(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b'{"status": "success", "data": {"resultType": "streams", "result": [{"stream": {}, "values": ['
            chunk = b'["1", "' + b"x" * (1 << 20) + b'"],'
            for _ in range(200):
                sent["bytes"] += len(chunk)
                yield chunk

    config = SourcesConfig.model_validate({"loki": [{"name": "main", "url": URL}]})
    incident = _incident(recording)

    async def go() -> None:
        with respx.mock(assert_all_called=False) as router:
            router.route(host="loki.test").mock(return_value=httpx.Response(200, stream=Huge()))
            async with open_live_sources(config, environ={}) as live:
                assert live.sources.logs is not None
                await live.sources.logs.summary(incident=incident, service="order-service", text=None)

    with pytest.raises(AnswerTooLarge) as raised:
        asyncio.run(go())
    assert raised.value.source == "logs:main" and "passed 33,554,432 bytes" in str(raised.value)
    assert sent["bytes"] < 40 * (1 << 20)  # the cap and a chunk: not the 200 MB offered
