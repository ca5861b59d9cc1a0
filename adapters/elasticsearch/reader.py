"""Elasticsearch / OpenSearch logs through the official async client on its httpx node.

A logs *reader* (:class:`opsagent.sources.readers.LogsReader`): one index pattern, field names
configurable (ECS by default), a query by time range, service, level and text. Exact counts come
from aggregations (terms on level and service over the window, a date histogram of levels); raw
hits are paged with ``search_after`` over a point in time, up to a cap, for the summariser.

Read-only: it calls ``GET /``, ``_search``, ``_field_caps`` and opens and closes points in time
(a read context; no document or index changes). Client errors are translated here, once. Every
answer is capped as it is read (:func:`opsagent.sizecap.size_cap` on the node's httpx client), as
the other upstreams' are: a larger one is an ``AnswerTooLarge``, read no further than the cap.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal, TypeVar

import structlog
from elastic_transport import (
    ApiError,
    ConnectionTimeout,
    HttpHeaders,
    HttpxAsyncHttpNode,
    NodeConfig,
    SerializationError,
    TransportError,
)
from elastic_transport._node import NodeApiResponse
from elasticsearch import AsyncElasticsearch, UnsupportedProductError

from adapters.boundary import MALFORMED, ErrorTable, error_text, status_error, translate
from adapters.elasticsearch.config import LogFields
from opsagent.errors import MalformedResponse, SourceTimeout, SourceUnavailable
from opsagent.fixtures import LogRecord
from opsagent.models import TimeRange
from opsagent.sizecap import BodyTooLarge, size_cap
from opsagent.sources.queries import LevelBucket, LogBatch, LogCounts, LogQuery

log = structlog.get_logger("opsagent.adapters")

T = TypeVar("T")
Flavour = Literal["elasticsearch", "opensearch"]

#: elasticsearch/elastic-transport exceptions, most specific first (API errors go by status).
ERRORS: ErrorTable = (
    (ConnectionTimeout, SourceTimeout),
    (SerializationError, MalformedResponse),
    (TransportError, SourceUnavailable),  # connection refused, TLS, sniffing
    (ApiError, SourceUnavailable),
    *MALFORMED,
)

_REGEX_CHARS = re.compile(r"[.^$*+?{}\[\]\\|()]")
_KEEP_ALIVE = "1m"


class PlainJsonNode(HttpxAsyncHttpNode):
    """The httpx node, asking for plain JSON, its answers capped in size.

    The 9.x client asks for ``compatible-with=9`` media types, which Elasticsearch 8 and OpenSearch
    refuse; plain ``application/json`` is understood by all of them."""

    def __init__(self, config: NodeConfig) -> None:
        super().__init__(config)
        self.client.event_hooks["response"] = [size_cap()]

    async def perform_request(  # type: ignore[override]
        self, method: str, target: str, body: bytes | None = None, headers: HttpHeaders | None = None, **kw: Any
    ) -> NodeApiResponse:
        plain = HttpHeaders(headers or {})
        for name in ("accept", "content-type"):
            if name in plain and "json" in plain[name]:
                plain[name] = "application/x-ndjson" if "ndjson" in plain[name] else "application/json"
        try:
            return await super().perform_request(method, target, body=body, headers=plain, **kw)
        except TransportError as exc:  # the node wraps whatever its read raised; the cap is said as such
            if isinstance(exc.__cause__, BodyTooLarge):
                raise exc.__cause__ from None
            raise


class OpenSearchNode(PlainJsonNode):
    """OpenSearch does not send the product header the official client checks for; its answers are
    marked here, at the transport, so the client takes them."""

    async def perform_request(  # type: ignore[override]
        self, method: str, target: str, body: bytes | None = None, headers: HttpHeaders | None = None, **kw: Any
    ) -> NodeApiResponse:
        response = await super().perform_request(method, target, body=body, headers=headers, **kw)
        response.meta.headers["x-elastic-product"] = "Elasticsearch"
        return response


def elasticsearch_client(
    url: str,
    *,
    flavour: Flavour = "elasticsearch",
    api_key: str | None = None,
    username: str | None = None,
    password: str | None = None,
    verify: bool | str = True,
    timeout_s: float = 10.0,
) -> AsyncElasticsearch:
    """An async client on the httpx node: API key or basic auth, TLS verification (on, off, or a CA
    bundle path), a timeout, no retries (the tool layer has a per-call budget)."""
    tls: dict[str, Any] = {"ca_certs": verify} if isinstance(verify, str) else {}
    return AsyncElasticsearch(
        hosts=[url],
        node_class=OpenSearchNode if flavour == "opensearch" else PlainJsonNode,
        api_key=api_key,
        basic_auth=(username, password or "") if username else None,
        verify_certs=verify is not False,
        **tls,
        ssl_show_warn=False,
        request_timeout=timeout_s,
        max_retries=0,
        retry_on_timeout=False,
    )


class ElasticsearchReader:
    def __init__(
        self,
        client: AsyncElasticsearch,
        *,
        name: str,
        index: str,
        fields: LogFields | None = None,
        flavour: Flavour = "elasticsearch",
        max_hits: int = 10_000,
        page_size: int = 2_000,
    ) -> None:
        self.client = client
        self.name = f"logs:{name}"
        self.index = index
        self.fields = fields or LogFields()
        self.flavour = flavour
        self.max_hits = max_hits
        self.page_size = min(page_size, max_hits)

    async def _call(self, fn: Callable[[], Awaitable[T]], *, query: str, window: tuple[datetime, datetime] | None) -> T:
        started = time.perf_counter()
        try:
            result = await fn()
        except UnsupportedProductError as exc:
            raise SourceUnavailable(
                "the server is not Elasticsearch (for OpenSearch set flavour: opensearch)",
                source=self.name,
                query=query,
                window=window,
            ) from exc
        except ApiError as exc:
            kind = status_error(exc.meta.status)
            raise kind(
                f"HTTP {exc.meta.status}: {error_text(exc.body)}",
                source=self.name,
                query=query,
                window=window,
                status=exc.meta.status,
            ) from exc
        except Exception as exc:
            raise translate(exc, ERRORS, source=self.name, query=query, window=window) from exc
        log.debug("adapter.query", source=self.name, query=query, ms=round((time.perf_counter() - started) * 1000))
        return result

    # ------------------------------------------------------------ the query

    def _range(self, period: TimeRange) -> dict[str, Any]:
        bounds = {"gte": _iso(period.start), "lt": _iso(period.end), "format": "strict_date_optional_time"}
        return {"range": {self.fields.timestamp: bounds}}

    def search_query(self, query: LogQuery) -> dict[str, Any]:
        f = self.fields
        filters: list[dict[str, Any]] = [
            {"bool": {"should": [self._range(query.baseline), self._range(query.window)], "minimum_should_match": 1}}
        ]
        if query.service:
            filters.append({"term": {f.service: query.service}})
        if query.text and not _REGEX_CHARS.search(query.text):
            # A phrase is matched by the store; a regular expression is applied to the lines read.
            filters.append({"match_phrase": {f.message: query.text}})
        return {"bool": {"filter": filters}}

    def aggregations(self, query: LogQuery) -> dict[str, Any]:
        f = self.fields
        offset = int(query.start.timestamp()) % query.bucket_s
        return {
            "window": {
                "filter": self._range(query.window),
                "aggs": {
                    "levels": {"terms": {"field": f.level, "size": 100}},
                    "services": {"terms": {"field": f.service, "size": 1000}},
                },
            },
            "histogram": {
                "date_histogram": {
                    "field": f.timestamp,
                    "fixed_interval": f"{query.bucket_s}s",
                    "offset": f"+{offset}s",
                    "min_doc_count": 1,
                },
                "aggs": {"levels": {"terms": {"field": f.level, "size": 100}}},
            },
        }

    # ------------------------------------------------------------ reading

    async def records(self, *, query: LogQuery) -> LogBatch:
        window = (query.start, query.end)
        described = f"{self.index} service={query.service or '*'} text={query.text or ''}".strip()
        pit = await self._call(self._open_pit, query=f"open point in time on {self.index}", window=window)
        try:
            records: list[LogRecord] = []
            counts: LogCounts | None = None
            after: list[Any] | None = None
            while len(records) < self.max_hits:
                size = min(self.page_size, self.max_hits - len(records))
                body = await self._call(
                    partial(self._page, pit, query, size=size, after=after, first=counts is None),
                    query=described,
                    window=window,
                )
                try:
                    if counts is None:
                        counts = self._counts(body, query)
                    hits = body["hits"]["hits"]
                    records.extend(r for r in (self._record(h) for h in hits) if r is not None)
                except (KeyError, TypeError, ValueError) as exc:
                    raise MalformedResponse(
                        f"not a search response: {exc!r}", source=self.name, query=described, window=window
                    ) from exc
                pit = body.get("pit_id", pit)
                if len(hits) < size:
                    break
                after = hits[-1]["sort"]
        finally:
            await self._close_pit(pit)
        total = counts.total if counts else len(records)
        complete = len(records) >= total
        if not complete:
            log.info("adapter.logs_capped", source=self.name, read=len(records), total=total)
        if query.text and _REGEX_CHARS.search(query.text):
            counts = None  # counted before the regular expression was applied: not the answer's counts
        return LogBatch(records=records, counts=counts, complete=complete)

    async def _open_pit(self) -> str:
        if self.flavour == "opensearch":
            response = await self.client.perform_request(
                "POST", f"/{self.index}/_search/point_in_time", params={"keep_alive": _KEEP_ALIVE}
            )
            return str(response.body["pit_id"])
        response = await self.client.open_point_in_time(index=self.index, keep_alive=_KEEP_ALIVE)
        return str(response.body["id"])

    async def _close_pit(self, pit: str) -> None:
        try:
            if self.flavour == "opensearch":
                await self.client.perform_request(
                    "DELETE",
                    "/_search/point_in_time",
                    body={"pit_id": [pit]},
                    headers={"content-type": "application/json"},
                )
            else:
                await self.client.close_point_in_time(id=pit)
        except (ApiError, TransportError) as exc:  # it expires on its own within keep_alive
            log.info("adapter.pit_not_closed", source=self.name, error=str(exc))

    async def _page(
        self, pit: str, query: LogQuery, *, size: int, after: list[Any] | None, first: bool
    ) -> Mapping[str, Any]:
        extra: dict[str, Any] = {}
        if first:
            extra["aggregations"] = self.aggregations(query)
            extra["track_total_hits"] = True
        if after is not None:
            extra["search_after"] = after
        response = await self.client.search(
            pit={"id": pit, "keep_alive": _KEEP_ALIVE},
            query=self.search_query(query),
            sort=[{self.fields.timestamp: {"order": "asc"}}],
            size=size,
            source=False,
            fields=[{"field": name} for name in self.fields.wanted()],
            **extra,
        )
        return response.body

    def _counts(self, body: Mapping[str, Any], query: LogQuery) -> LogCounts:
        aggs = body["aggregations"]
        total = body["hits"]["total"]
        buckets = [
            LevelBucket(
                start=_when(b["key_as_string"] if "key_as_string" in b else b["key"]),
                levels={str(lv["key"]): int(lv["doc_count"]) for lv in b["levels"]["buckets"]},
            )
            for b in aggs["histogram"]["buckets"]
        ]
        for bucket, raw in zip(buckets, aggs["histogram"]["buckets"], strict=True):
            missing = int(raw["doc_count"]) - sum(bucket.levels.values())
            if missing > 0:  # lines with no level field
                bucket.levels["unknown"] = bucket.levels.get("unknown", 0) + missing
        window = aggs["window"]
        by_level = {str(b["key"]): int(b["doc_count"]) for b in window["levels"]["buckets"]}
        unlevelled = int(window["doc_count"]) - sum(by_level.values())
        if unlevelled > 0:
            by_level["unknown"] = by_level.get("unknown", 0) + unlevelled
        return LogCounts(
            total=int(total["value"] if isinstance(total, dict) else total),
            window_by_level=by_level,
            window_by_service={str(b["key"]): int(b["doc_count"]) for b in window["services"]["buckets"]},
            buckets=buckets,
        )

    def _record(self, hit: Mapping[str, Any]) -> LogRecord | None:
        got = hit.get("fields") or {}
        f = self.fields

        def one(name: str | None) -> str | None:
            values = got.get(name) if name else None
            return str(values[0]) if values else None

        stamp, message = one(f.timestamp), one(f.message)
        if stamp is None or message is None:
            return None  # not a log line this reader can place in time
        return LogRecord(
            ts=_when(stamp),
            service=one(f.service) or "unknown",
            level=one(f.level) or "unknown",
            message=message,
            trace_id=one(f.trace_id),
            pod=one(f.pod),
        )

    # ------------------------------------------------------------ for doctor

    async def server_info(self) -> dict[str, Any]:
        response = await self._call(self.client.info, query="GET /", window=None)
        return dict(response.body)

    async def missing_fields(self) -> list[str]:
        """Configured fields the index pattern does not have."""
        response = await self._call(
            lambda: self.client.field_caps(index=self.index, fields=self.fields.wanted()),
            query=f"field caps of {self.index}",
            window=None,
        )
        present = set(response.body.get("fields", {}))
        return [name for name in self.fields.wanted() if name not in present]


def _iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _when(value: str | int | float) -> datetime:
    """A date as the search API formats it: ISO 8601, or epoch milliseconds."""
    if isinstance(value, int | float) or (isinstance(value, str) and value.isdigit()):
        return datetime.fromtimestamp(float(value) / 1000, tz=UTC)
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
