"""The Elasticsearch/OpenSearch logs adapter, with respx against the REST API's request and
response shapes (see tests/fake_elasticsearch.py for the documentation each shape follows)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import respx

from adapters.elasticsearch.config import ElasticsearchConfig, LogFields
from adapters.elasticsearch.reader import ElasticsearchReader, elasticsearch_client
from opsagent.doctor import check
from opsagent.errors import (
    AnswerTooLarge,
    MalformedResponse,
    QueryRejected,
    SourceAuthFailed,
    SourceTimeout,
    SourceUnavailable,
)
from opsagent.fixtures import Recording, load
from opsagent.incident import open_incident
from opsagent.logsummary import SimpleSummariser
from opsagent.models import Incident, LogsData
from opsagent.sources.live import LiveLogs
from opsagent.sources.replay import ReplayLogs
from tests.conftest import ORDER_INCIDENT
from tests.fake_elasticsearch import FakeElasticsearch, documents

URL = "http://es.test:9200"
#: What a read-only logs reader may send.
READS = {
    ("GET", "/"),
    ("POST", "/logs-*/_pit"),
    ("POST", "/_search"),
    ("DELETE", "/_pit"),
    ("POST", "/logs-*/_field_caps"),
}


@pytest.fixture(scope="module")
def recording() -> Recording:
    rec, _ = load(ORDER_INCIDENT)
    return rec


@pytest.fixture(scope="module")
def docs(recording: Recording) -> list[dict[str, object]]:
    return documents(recording.logs)


@pytest.fixture
def router() -> Iterator[respx.Router]:
    with respx.mock(assert_all_called=False) as mock:
        yield mock


def _incident(rec: Recording) -> Incident:
    return open_incident(rec.alert, window=rec.window, baseline=rec.baseline, id=rec.slug)


def _reader(**kw: object) -> ElasticsearchReader:
    client = elasticsearch_client(URL, api_key="k3y", flavour=kw.pop("flavour", "elasticsearch"))  # type: ignore[arg-type]
    return ElasticsearchReader(client, name="es", index="logs-*", **kw)  # type: ignore[arg-type]


def _summary(reader: ElasticsearchReader, incident: Incident, service: str | None, text: str | None = None) -> LogsData:
    async def go() -> LogsData:
        try:
            return await LiveLogs(reader, summariser=SimpleSummariser()).summary(
                incident=incident, service=service, text=text
            )
        finally:
            await reader.client.close()

    return asyncio.run(go())


def _replay(rec: Recording, incident: Incident, service: str | None, text: str | None = None) -> LogsData:
    return asyncio.run(ReplayLogs(rec, SimpleSummariser()).summary(incident=incident, service=service, text=text))


@pytest.mark.parametrize("service", ["order-service", None])
def test_summary_matches_replay_when_every_line_is_read(
    router: respx.Router, recording: Recording, docs: list[dict[str, object]], service: str | None
) -> None:
    fake = FakeElasticsearch(docs)
    fake.install(router, URL)
    incident = _incident(recording)
    got = _summary(_reader(max_hits=50_000, page_size=5_000), incident, service)
    want = _replay(recording, incident, service)
    assert got == want.model_copy(update={"outside_range": got.outside_range})
    assert set(fake.requests) <= READS and not fake.open_pits  # read-only, and the point in time is closed
    assert router.calls[0].request.headers["authorization"] == "ApiKey k3y"


def test_capped_read_keeps_exact_counts_from_aggregations(
    router: respx.Router, recording: Recording, docs: list[dict[str, object]]
) -> None:
    fake = FakeElasticsearch(docs)
    fake.install(router, URL)
    incident = _incident(recording)
    got = _summary(_reader(max_hits=1_000, page_size=400), incident, None)
    want = _replay(recording, incident, None)
    assert got.estimated and not want.estimated
    assert got.total == want.total
    assert got.by_service == want.by_service
    assert got.by_level == want.by_level  # stored spellings (ERROR, ERR, error…) named as the summariser names them
    assert got.histogram == want.histogram and got.error_histogram == want.error_histogram
    searches = [b for b in fake.search_bodies]
    assert sum(len(b.get("search_after", [])) > 0 for b in searches) == 2  # 400 + 400 + 200 lines
    assert all(b["size"] <= 400 for b in searches)


def test_a_huge_result_reads_only_up_to_the_cap(router: respx.Router, recording: Recording) -> None:
    start = recording.window.start
    many = [
        {
            "@timestamp": start.isoformat().replace("+00:00", "Z"),
            "service.name": "api",
            "log.level": "ERROR",
            "message": f"boom {i}",
        }
        for i in range(60_000)
    ]
    fake = FakeElasticsearch(many)
    fake.install(router, URL)
    got = _summary(_reader(max_hits=300, page_size=300), _incident(recording), None)
    assert got.estimated and got.total == 60_000 and len(fake.search_bodies) == 1


def test_text_is_a_phrase_for_the_store_and_a_regex_for_the_lines(
    router: respx.Router, recording: Recording, docs: list[dict[str, object]]
) -> None:
    fake = FakeElasticsearch(docs)
    fake.install(router, URL)
    incident = _incident(recording)
    got = _summary(_reader(max_hits=50_000, page_size=5_000), incident, "order-service", "connection timeout")
    want = _replay(recording, incident, "order-service", "connection timeout")
    assert got.total == want.total > 0
    assert {"match_phrase": {"message": "connection timeout"}} in fake.search_bodies[0]["query"]["bool"]["filter"]


def test_empty_result(router: respx.Router, recording: Recording) -> None:
    FakeElasticsearch([]).install(router, URL)
    got = _summary(_reader(), _incident(recording), "nobody")
    assert got.total == 0 and got.templates == [] and not got.estimated


def _failing(router: respx.Router, status: int, body: dict[str, object]) -> None:
    router.post(f"{URL}/logs-*/_pit").mock(
        return_value=httpx.Response(200, json={"id": "p"}, headers={"X-Elastic-Product": "Elasticsearch"})
    )
    router.delete(f"{URL}/_pit").mock(
        return_value=httpx.Response(200, json={"succeeded": True}, headers={"X-Elastic-Product": "Elasticsearch"})
    )
    router.post(f"{URL}/_search").mock(
        return_value=httpx.Response(status, json=body, headers={"X-Elastic-Product": "Elasticsearch"})
    )


def test_error_bodies_become_the_projects_errors(router: respx.Router, recording: Recording) -> None:
    incident = _incident(recording)
    # https://www.elastic.co/guide/en/elasticsearch/reference/current/common-options.html (error responses)
    _failing(
        router,
        400,
        {
            "error": {
                "root_cause": [
                    {"type": "query_shard_exception", "reason": "failed to create query: field [log.level] is text"}
                ],
                "type": "search_phase_execution_exception",
                "reason": "all shards failed",
            },
            "status": 400,
        },
    )
    with pytest.raises(QueryRejected, match="query_shard_exception: failed to create query") as caught:
        _summary(_reader(), incident, "order-service")
    assert caught.value.source == "logs:es" and caught.value.window is not None
    router.reset()
    router.routes.clear()
    _failing(
        router,
        401,
        {
            "error": {
                "root_cause": [{"type": "security_exception", "reason": "unable to authenticate"}],
                "type": "security_exception",
                "reason": "unable to authenticate",
            },
            "status": 401,
        },
    )
    with pytest.raises(SourceAuthFailed, match="security_exception"):
        _summary(_reader(), incident, None)


def test_missing_index_timeout_and_wrong_product(router: respx.Router, recording: Recording) -> None:
    incident = _incident(recording)
    router.post(f"{URL}/logs-*/_pit").mock(
        return_value=httpx.Response(
            404,
            json={
                "error": {
                    "root_cause": [{"type": "index_not_found_exception", "reason": "no such index [logs-*]"}],
                    "type": "index_not_found_exception",
                    "reason": "no such index [logs-*]",
                },
                "status": 404,
            },
            headers={"X-Elastic-Product": "Elasticsearch"},
        )
    )
    with pytest.raises(SourceUnavailable, match="index_not_found_exception"):
        _summary(_reader(), incident, None)
    router.routes.clear()
    router.post(f"{URL}/logs-*/_pit").mock(side_effect=httpx.ReadTimeout("slow"))
    with pytest.raises(SourceTimeout):
        _summary(_reader(), incident, None)
    router.routes.clear()
    router.post(f"{URL}/logs-*/_pit").mock(return_value=httpx.Response(200, json={"id": "p"}))
    with pytest.raises(SourceUnavailable, match="flavour: opensearch"):
        _summary(_reader(), incident, None)


def test_malformed_search_answer(router: respx.Router, recording: Recording) -> None:
    _failing(router, 200, {"took": 1, "hits": "not hits"})
    with pytest.raises(MalformedResponse, match="not a search response"):
        _summary(_reader(), _incident(recording), None)


def test_opensearch_flavour(router: respx.Router, recording: Recording, docs: list[dict[str, object]]) -> None:
    """OpenSearch: PIT at /<index>/_search/point_in_time, no product header, plain JSON media types.
    https://opensearch.org/docs/latest/search-plugins/searching-data/point-in-time-api/"""
    fake = FakeElasticsearch(docs, product=False)

    def open_pit(request: httpx.Request) -> httpx.Response:
        fake.open_pits.add("os-pit")
        return httpx.Response(200, json={"pit_id": "os-pit", "creation_time": 1})

    router.post(f"{URL}/logs-*/_search/point_in_time").mock(side_effect=open_pit)
    router.delete(f"{URL}/_search/point_in_time").mock(
        return_value=httpx.Response(200, json={"pits": [{"pit_id": "os-pit", "successful": True}]})
    )
    fake.install(router, URL)
    incident = _incident(recording)
    got = _summary(_reader(flavour="opensearch", max_hits=50_000, page_size=5_000), incident, "order-service")
    want = _replay(recording, incident, "order-service")
    assert got.total == want.total and got.templates == want.templates
    accept = router.calls[0].request.headers["accept"]
    assert accept == "application/json"


def test_doctor_reads_the_version_and_names_missing_fields(router: respx.Router) -> None:
    fake = FakeElasticsearch([])
    fake.install(router, URL)
    config = ElasticsearchConfig(name="logs", url=URL, fields=LogFields(pod="k8s.pod.name"), auth="api_key")
    health = asyncio.run(check(config, environ={"OPSAGENT_ELASTICSEARCH_LOGS_API_KEY": "k"}))
    assert health.reachable and health.version == "8.15.0" and health.latency_ms is not None
    assert health.problems == ["no field 'k8s.pod.name' in logs-*"] and "set fields:" in health.fixes[0]
    assert set(fake.requests) <= READS


def test_an_answer_of_200_mb_is_stopped_at_the_size_cap_as_it_streams_in(
    router: respx.Router, recording: Recording
) -> None:
    sent = {"bytes": 0}
    product = {"x-elastic-product": "Elasticsearch", "content-type": "application/json"}

    class Huge(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b'{"took": 1, "hits": {"hits": ['
            chunk = b'{"_source": {"message": "' + b"x" * (1 << 20) + b'"}},'
            for _ in range(200):
                sent["bytes"] += len(chunk)
                yield chunk

    router.route(host="es.test").mock(return_value=httpx.Response(200, headers=product, stream=Huge()))
    with pytest.raises(AnswerTooLarge) as raised:
        _summary(_reader(), _incident(recording), "order-service")
    assert raised.value.source == "logs:es" and "passed 33,554,432 bytes" in str(raised.value)
    assert sent["bytes"] < 40 * (1 << 20)  # the cap and a chunk: not the 200 MB offered

    said = 200 * (1 << 20)  # one that says its size is refused before its body is read
    router.route(host="es.test").mock(
        return_value=httpx.Response(200, headers={**product, "content-length": str(said)}, stream=Huge())
    )
    sent["bytes"] = 0
    with pytest.raises(AnswerTooLarge):
        _summary(_reader(), _incident(recording), "order-service")
    assert sent["bytes"] == 0
