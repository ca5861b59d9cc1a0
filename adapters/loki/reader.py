"""Grafana Loki logs through its HTTP API (LogQL ``query_range`` and ``query``), over httpx.

A logs *reader* (:class:`opsagent.sources.readers.LogsReader`), summarised by the same summariser as
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

import math
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Literal

import httpx
import structlog

from adapters.boundary import HTTPX_ERRORS, http_error, translate
from adapters.loki.config import LokiLabels
from opsagent.errors import MalformedResponse
from opsagent.fixtures import LogRecord
from opsagent.models import TimeRange
from opsagent.sources.queries import LevelBucket, LogBatch, LogCounts, LogQuery

log = structlog.get_logger("opsagent.adapters")

Parser = Literal["none", "json", "logfmt"]
_NS = 1_000_000_000


def logql_string(value: str) -> str:
    """A LogQL double-quoted string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _ns(ts: datetime) -> int:
    return int(ts.timestamp() * _NS)


def _seconds(period: TimeRange) -> int:
    return max(int(period.end.timestamp() - period.start.timestamp()), 1)


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
        limit = min(self.page_size, budget)
        while len(out) < budget:
            data = await self._get(
                "/loki/api/v1/query_range",
                {"query": text, "start": start, "end": end, "limit": limit, "direction": "forward"},
                window=window,
            )
            if data.get("resultType") != "streams":
                raise MalformedResponse(
                    f"expected streams, got {data.get('resultType')!r}", source=self.name, query=text, window=window
                )
            with self._shape("streams", text, window):
                entries = sorted(
                    ((int(ts), str(line), dict(s["stream"])) for s in data["result"] for ts, line, *_ in s["values"]),
                    key=lambda e: e[0],
                )
            fresh = [e for e in entries if (e[0], e[1], str(sorted(e[2].items()))) not in seen_at_start]
            out.extend(self._record(ts, line, stream, query) for ts, line, stream in fresh[: budget - len(out)])
            if len(entries) < limit:
                return out, True
            if not fresh:
                # Every line of the page shares the nanosecond it started at: only a larger page gets past it.
                if limit >= budget - len(out) + len(seen_at_start):
                    return out, False
                limit = min(limit * 2, budget - len(out) + len(seen_at_start))
                continue
            # The next page starts at the last timestamp (start is inclusive): the lines already read at
            # that nanosecond are skipped, none are lost.
            start = entries[-1][0]
            seen_at_start = {(ts, line, str(sorted(st.items()))) for ts, line, st in entries if ts == start}
            limit = min(self.page_size, budget - len(out) + len(seen_at_start))
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
        by_level = await self._instant(
            self.count_query(query, lb.level, _seconds(query.window)), query.window.end, lb.level, window
        )
        by_service = await self._instant(
            self.count_query(query, lb.service, _seconds(query.window)), query.window.end, lb.service, window
        )
        base = await self._instant(
            self.count_query(query, None, _seconds(query.baseline)), query.baseline.end, None, window
        )
        buckets: dict[float, dict[str, int]] = {}
        for period in (query.baseline, query.window):
            for t, level, n in await self._buckets(query, period, window):
                bucket = buckets.setdefault(t, {})
                bucket[level] = bucket.get(level, 0) + n
        return LogCounts(
            total=sum(by_level.values()) + sum(base.values()),
            window_by_level=by_level,
            window_by_service=by_service,
            buckets=[
                LevelBucket(start=datetime.fromtimestamp(t, tz=UTC), levels=levels)
                for t, levels in sorted(buckets.items())
            ],
        )

    async def _buckets(
        self, query: LogQuery, period: TimeRange, window: tuple[datetime, datetime]
    ) -> list[tuple[float, str, int]]:
        """(bucket start, level, lines) over one period, buckets on the query's grid (as the summariser's).

        A value of ``count_over_time(…[step])`` at t counts (t - step, t]: evaluated at the grid's ends
        inside the period, and for the part of a bucket the period cuts, an instant query of that part."""
        lb = self.labels
        step = query.bucket_s
        grid0 = query.start.timestamp()
        lo, hi = period.start.timestamp(), period.end.timestamp()
        a = grid0 + math.ceil((lo - grid0) / step) * step  # the first bucket start inside the period
        b = grid0 + math.floor((hi - grid0) / step) * step  # the last bucket start inside it
        out: list[tuple[float, str, int]] = []
        if b >= a + step:  # whole buckets [a, b): one range query, evaluated at each bucket's end
            data = await self._get(
                "/loki/api/v1/query_range",
                {
                    "query": self.count_query(query, lb.level, step),
                    "start": int((a + step) * _NS),
                    "end": int(b * _NS),
                    "step": f"{step}s",
                },
                window=window,
            )
            with self._shape("matrix", self.count_query(query, lb.level, step), window):
                for series in data["result"]:
                    level = (series["metric"].get(lb.level) if lb.level else None) or "unknown"
                    for stamp, value in series["values"]:
                        out.append((float(stamp) - step, level, int(float(value))))
        parts = []  # (bucket start, evaluation time, range) of buckets the period cuts
        if lo < a or a > hi:
            parts.append((a - step, min(a, hi), min(a, hi) - lo))
        if a <= b < hi:
            parts.append((b, hi, hi - b))
        for bucket_start, at, range_s in parts:
            if range_s >= 1:
                text = self.count_query(query, lb.level, round(range_s))
                counts = await self._instant(text, datetime.fromtimestamp(at, tz=UTC), lb.level, window)
                out.extend((bucket_start, level, n) for level, n in counts.items())
        return out

    async def _instant(
        self, text: str, at: datetime, label: str | None, window: tuple[datetime, datetime]
    ) -> dict[str, int]:
        data = await self._get("/loki/api/v1/query", {"query": text, "time": _ns(at)}, window=window)
        out: dict[str, int] = {}
        with self._shape("vector", text, window):
            for series in data["result"]:
                key = (series["metric"].get(label) if label else None) or "unknown"
                out[key] = out.get(key, 0) + int(float(series["value"][1]))
        return out

    @contextmanager
    def _shape(self, expected: str, query: str, window: tuple[datetime, datetime]) -> Iterator[None]:
        """Reading an answer's result: a field missing or of the wrong type is a malformed answer
        that says what was expected, not a ``KeyError: 'metric'``."""
        try:
            yield
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            found = f"no field {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
            raise MalformedResponse(
                f"not a Loki {expected} answer ({found})", source=self.name, query=query, window=window
            ) from exc

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
