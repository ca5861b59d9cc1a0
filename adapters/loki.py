"""Grafana Loki logs through its HTTP API (LogQL ``query_range`` and ``query``), over httpx.

A logs *reader* (:class:`adapters.protocols.LogsReader`), summarised by the same summariser as
Elasticsearch's lines. One stream selector per question: the configured matchers (``selector``),
the service label, a case-insensitive line filter for the text, and an optional parser stage
(``| json`` / ``| logfmt``) that turns fields of the line into labels the level, trace id and pod
are read from (label names configurable, like ECS field names for Elasticsearch). Lines are paged
forward through the baseline and the window up to a cap; where the cap cuts them, exact counts come
from LogQL metric queries (``count_over_time`` by level, by service, per bucket), as aggregations do
for Elasticsearch. Multi-tenant Loki gets ``X-Scope-OrgID``.

Read-only: it only sends GET to ``/loki/api/v1/query_range``, ``/loki/api/v1/query`` and
``/loki/api/v1/status/buildinfo``. The httpx client is injected; errors are translated here, once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

import httpx
import structlog

from adapters.boundary import HTTPX_ERRORS, http_error, translate
from adapters.readers import LevelBucket, LogBatch, LogCounts, LogQuery
from adapters.sourceconfig import LokiLabels
from opsagent.errors import MalformedResponse
from opsagent.fixtures import LogRecord
from opsagent.models import TimeRange

log = structlog.get_logger("opsagent.adapters")

Parser = Literal["none", "json", "logfmt"]
_NS = 1_000_000_000


def logql_string(value: str) -> str:
    """A LogQL double-quoted string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _ns(ts: datetime) -> int:
    return int(ts.timestamp() * _NS)


class LokiReader:
    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        name: str,
        labels: LokiLabels | None = None,
        selector: str = "",
        parser: Parser = "none",
        max_lines: int = 10_000,
        page_size: int = 5_000,
    ) -> None:
        self.client = client
        self.name = f"logs:{name}"
        self.labels = labels or LokiLabels()
        self.selector = selector
        self.parser = parser
        self.max_lines = max_lines
        self.page_size = min(page_size, max_lines)

    # ------------------------------------------------------------ LogQL

    def stream_selector(self, service: str | None) -> str:
        own = f"{self.labels.service}={logql_string(service)}" if service else f'{self.labels.service}=~".+"'
        return "{" + ", ".join(m for m in (self.selector, own) if m) + "}"

    def log_query(self, query: LogQuery) -> str:
        """The stream selector, the text as a case-insensitive RE2 line filter, the parser stage."""
        parts = [self.stream_selector(query.service)]
        if query.text:
            parts.append(f"|~ {logql_string('(?i)' + query.text)}")
        if self.parser != "none":
            parts.append(f"| {self.parser}")
        return " ".join(parts)

    def count_query(self, query: LogQuery, by: str | None, range_s: int) -> str:
        grouping = f" by ({by})" if by else ""
        return f"sum{grouping} (count_over_time({self.log_query(query)} [{range_s}s]))"

    # ------------------------------------------------------------ HTTP

    async def _get(self, path: str, params: Mapping[str, str | int], *, window: tuple[datetime, datetime]) -> Any:
        described = f"GET {path} {params.get('query', '')}".strip()
        started = time.perf_counter()
        try:
            response = await self.client.get(path, params=dict(params))
        except Exception as exc:
            raise translate(exc, HTTPX_ERRORS, source=self.name, query=described, window=window) from exc
        if response.is_error:
            raise http_error(response, source=self.name, query=described, window=window)
        try:
            body = response.json()
            if body.get("status") != "success":
                raise ValueError(f"status {body.get('status')!r}")
            data = body["data"]
            log.debug(
                "adapter.query", source=self.name, query=described, ms=round((time.perf_counter() - started) * 1000)
            )
            return data
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise MalformedResponse(
                f"not a Loki answer: {exc}", source=self.name, query=described, window=window
            ) from exc

    # ------------------------------------------------------------ reading

    async def records(self, *, query: LogQuery) -> LogBatch:
        window = (query.start, query.end)
        records: list[LogRecord] = []
        complete = True
        baseline_budget = self.max_lines // 2
        for period, budget in ((query.baseline, baseline_budget), (query.window, None)):
            left = (budget if budget is not None else self.max_lines - len(records)) or 0
            lines, whole = await self._lines(query, period, left, window=window)
            records.extend(lines)
            complete = complete and whole
        records.sort(key=lambda r: r.ts)
        if complete:
            return LogBatch(records=records, complete=True)
        log.info("adapter.logs_capped", source=self.name, read=len(records))
        return LogBatch(records=records, counts=await self._counts(query, window=window), complete=False)

    async def _lines(
        self, query: LogQuery, period: TimeRange, budget: int, *, window: tuple[datetime, datetime]
    ) -> tuple[list[LogRecord], bool]:
        """Lines of one period, oldest first, up to ``budget``; and whether that was all of them."""
        out: list[LogRecord] = []
        start, end = _ns(period.start), _ns(period.end)
        seen_at_start: set[tuple[int, str, str]] = set()
        text = self.log_query(query)
        while len(out) < budget:
            limit = min(self.page_size, budget - len(out))
            data = await self._get(
                "/loki/api/v1/query_range",
                {"query": text, "start": start, "end": end, "limit": limit, "direction": "forward"},
                window=window,
            )
            if data.get("resultType") != "streams":
                raise MalformedResponse(
                    f"expected streams, got {data.get('resultType')!r}", source=self.name, query=text, window=window
                )
            entries = sorted(
                (
                    (int(ts), line, stream)
                    for s in data["result"]
                    for stream in (s["stream"],)
                    for ts, line, *_ in s["values"]
                ),
                key=lambda e: e[0],
            )
            fresh = [e for e in entries if (e[0], e[1], str(sorted(e[2].items()))) not in seen_at_start]
            out.extend(self._record(ts, line, stream, query) for ts, line, stream in fresh[: budget - len(out)])
            if len(entries) < limit:
                return out, True
            # The next page starts at the last timestamp (end is exclusive, start inclusive): lines
            # already read at that nanosecond are skipped, none are lost.
            start = entries[-1][0]
            seen_at_start = {(ts, line, str(sorted(st.items()))) for ts, line, st in entries if ts == start}
            if not fresh:  # a whole page at one nanosecond: more lines than the page holds at one instant
                return out, False
        return out, False

    def _record(self, ts: int, line: str, stream: Mapping[str, str], query: LogQuery) -> LogRecord:
        lb = self.labels
        return LogRecord(
            ts=datetime.fromtimestamp(ts / _NS, tz=UTC),
            service=stream.get(lb.service) or query.service or "unknown",
            level=(stream.get(lb.level) if lb.level else None) or "unknown",
            message=line,
            trace_id=stream.get(lb.trace_id) if lb.trace_id else None,
            pod=stream.get(lb.pod) if lb.pod else None,
        )

    async def _counts(self, query: LogQuery, *, window: tuple[datetime, datetime]) -> LogCounts:
        """Exact counts from LogQL metric queries: what the capped lines cannot say."""
        lb = self.labels
        w_s = max(int(query.window.end.timestamp() - query.window.start.timestamp()), 1)
        b_s = max(int(query.baseline.end.timestamp() - query.baseline.start.timestamp()), 1)
        by_level = await self._instant(self.count_query(query, lb.level, w_s), query.window.end, lb.level, window)
        by_service = await self._instant(self.count_query(query, lb.service, w_s), query.window.end, lb.service, window)
        base = await self._instant(self.count_query(query, None, b_s), query.baseline.end, None, window)
        step = query.bucket_s
        data = await self._get(
            "/loki/api/v1/query_range",
            {
                "query": self.count_query(query, lb.level, step),
                # A value at t counts (t - step, t]: the bucket that starts at t - step.
                "start": _ns(query.start) + step * _NS,
                "end": _ns(query.end),
                "step": f"{step}s",
            },
            window=window,
        )
        buckets: dict[float, dict[str, int]] = {}
        for series in data["result"]:
            level = (series["metric"].get(lb.level) if lb.level else None) or "unknown"
            for stamp, value in series["values"]:
                bucket = buckets.setdefault(float(stamp) - step, {})
                bucket[level] = bucket.get(level, 0) + int(float(value))
        return LogCounts(
            total=sum(by_level.values()) + sum(base.values()),
            window_by_level=by_level,
            window_by_service=by_service,
            buckets=[
                LevelBucket(start=datetime.fromtimestamp(t, tz=UTC), levels=levels)
                for t, levels in sorted(buckets.items())
            ],
        )

    async def _instant(
        self, text: str, at: datetime, label: str | None, window: tuple[datetime, datetime]
    ) -> dict[str, int]:
        data = await self._get("/loki/api/v1/query", {"query": text, "time": _ns(at)}, window=window)
        out: dict[str, int] = {}
        for series in data["result"]:
            key = (series["metric"].get(label) if label else None) or "unknown"
            out[key] = out.get(key, 0) + int(float(series["value"][1]))
        return out

    # ------------------------------------------------------------ for doctor

    async def build_info(self) -> dict[str, Any]:
        now = datetime.now(UTC)
        try:
            response = await self.client.get("/loki/api/v1/status/buildinfo")
        except Exception as exc:
            raise translate(exc, HTTPX_ERRORS, source=self.name, query="GET buildinfo", window=(now, now)) from exc
        if response.is_error:
            raise http_error(response, source=self.name, query="GET /loki/api/v1/status/buildinfo")
        try:
            return dict(response.json())
        except ValueError as exc:
            raise MalformedResponse(f"not a Loki answer: {exc}", source=self.name, query="buildinfo") from exc
