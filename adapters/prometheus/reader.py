"""Prometheus (and PromQL-compatible stores: Thanos, Mimir, VictoriaMetrics) through prometheus-api-client.

A metrics *reader* (:class:`opsagent.sources.readers.MetricsReader`): range queries with the step sized to
at most ``max_points`` points, instant queries, and series discovery for triage's scan. It only
calls read endpoints (``/api/v1/query``, ``query_range``, ``series``, ``labels``, ``status/buildinfo``).
The client is built by :func:`prometheus_client` and injected; the blocking client runs in worker
threads, a bounded number at a time. requests/prometheus-api-client errors are translated here, once.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

import requests
import structlog
import urllib3
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from prometheus_api_client.exceptions import MetricValueConversionError
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from adapters.boundary import MALFORMED, ErrorTable, error_text, status_error, translate
from adapters.prometheus.config import DEFAULT_SCAN_MATCH
from opsagent.calls import bounded
from opsagent.errors import AnswerTooLarge, MalformedResponse, SourceTimeout, SourceUnavailable
from opsagent.fixtures import MetricSeries
from opsagent.selector import SelectorError, parse
from opsagent.sizecap import MAX_ANSWER_BYTES, BodyTooLarge
from opsagent.sources.queries import EXPRESSION_NAME
from opsagent.stats import ts

log = structlog.get_logger("opsagent.adapters")

T = TypeVar("T")

_SKIP_IN_SCAN = ("_bucket", "_created")

#: requests/prometheus-api-client exceptions, most specific first.
ERRORS: ErrorTable = (
    (BodyTooLarge, AnswerTooLarge),
    (requests.exceptions.Timeout, SourceTimeout),
    (requests.exceptions.JSONDecodeError, MalformedResponse),
    (requests.exceptions.RequestException, SourceUnavailable),  # refused, TLS, DNS, bad URL, too many redirects
    (urllib3.exceptions.HTTPError, SourceUnavailable),  # what requests did not wrap
    (PrometheusApiClientException, SourceUnavailable),
    (MetricValueConversionError, MalformedResponse),
    *MALFORMED,
)


class PrometheusClient(PrometheusConnect):
    """prometheus-api-client's client, with the build-info endpoint it does not wrap."""

    def build_info(self) -> dict[str, Any]:
        response = self._session.get(
            f"{self.url}/api/v1/status/buildinfo", headers=self.headers, auth=self.auth, timeout=self._timeout
        )
        data: dict[str, Any] = response.json()["data"]
        return data


class _BoundedSession(requests.Session):
    """A session whose every request ends when the tool call it serves must (:mod:`opsagent.calls`):
    the blocking client runs in a worker thread that the toolbox cannot cancel, so without this a
    server that never answers would hold the thread, and the process's exit, for the full timeout."""

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        timeout = kwargs.get("timeout")
        kwargs["timeout"] = bounded(timeout if isinstance(timeout, int | float) else None)
        return super().request(method, url, *args, **kwargs)


def _capped(response: requests.Response, *args: object, **kwargs: object) -> None:
    """A response hook: the body read here, stopping at :data:`MAX_ANSWER_BYTES` (requests calls
    response hooks before it reads the body, and then keeps what this read)."""
    url = response.url.split("?", 1)[0]
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
        response.close()
        raise BodyTooLarge(MAX_ANSWER_BYTES, url)
    body = bytearray()
    for chunk in response.iter_content(chunk_size=1 << 16):
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            response.close()
            raise BodyTooLarge(MAX_ANSWER_BYTES, url)
    response._content = bytes(body)  # what requests' own read would have set


def _raise_for_status(response: requests.Response, *args: object, **kwargs: object) -> None:
    """A response hook: error statuses raise with the response attached (status and error body)."""
    response.raise_for_status()


def prometheus_client(
    url: str,
    *,
    token: str | None = None,
    username: str | None = None,
    password: str | None = None,
    verify: bool | str = True,
    timeout_s: float = 10.0,
    headers: dict[str, str] | None = None,
) -> PrometheusClient:
    """A client with bearer or basic auth, TLS verification (on, off, or a CA bundle path), a
    timeout, no retries (the tool layer has a per-call budget), and error statuses raised."""
    session = _BoundedSession()
    session.verify = verify
    session.hooks["response"].extend((_capped, _raise_for_status))
    all_headers = dict(headers or {})
    if token:
        all_headers["Authorization"] = f"Bearer {token}"
    base = url.rstrip("/")
    client = PrometheusClient(
        url=base,
        headers=all_headers or None,
        auth=(username, password or "") if username else None,
        session=session,
        timeout=timeout_s,
        retry=Retry(total=0, raise_on_status=False),
    )
    session.mount(base, HTTPAdapter(max_retries=Retry(total=0, raise_on_status=False), pool_maxsize=16))
    return client


def step_for(start: float, end: float, *, max_points: int, min_step_s: float) -> float:
    """The range-query step: at most ``max_points`` points, a whole multiple of the minimum step."""
    raw = max(end - start, 0.0) / max(max_points - 1, 1)
    return max(min_step_s, math.ceil(raw / min_step_s) * min_step_s)


def sampled(query: str, step: float) -> tuple[str, str | None]:
    """The PromQL actually sent, and the metric name of its series.

    A plain selector is read as ``last_over_time(sel[step])``: each point is the last sample within
    its step, so a gap stays a gap (a crashed pod does not repeat its last value for five minutes)
    and a counter's per-point differences are its increases over the step. The range is a
    millisecond short of the step because Prometheus 2 ranges include their left end.
    """
    try:
        selector = parse(query)
    except SelectorError:
        return query, None
    if selector.constant is not None:
        return query, None
    return f"last_over_time({query}[{round(step * 1000) - 1}ms])", selector.name


class PrometheusReader:
    def __init__(
        self,
        client: PrometheusClient,
        *,
        name: str,
        max_points: int = 300,
        min_step_s: float = 60.0,
        scan_match: Sequence[str] = DEFAULT_SCAN_MATCH,
        scan_max_series: int = 5000,
        concurrency: int = 4,
    ) -> None:
        self.client = client
        self.name = f"metrics:{name}"
        self.max_points = max_points
        self.min_step_s = min_step_s
        self.scan_match = tuple(scan_match)
        self.scan_max_series = scan_max_series
        self._slots = asyncio.Semaphore(concurrency)

    async def _call(self, fn: Callable[[], T], *, query: str, window: tuple[float, float] | None = None) -> T:
        span = (ts(window[0]), ts(window[1])) if window else None
        async with self._slots:
            started = time.perf_counter()
            try:
                result = await asyncio.to_thread(fn)
            except requests.HTTPError as exc:
                status = exc.response.status_code if exc.response is not None else 0
                body = exc.response.content if exc.response is not None else b""
                kind = status_error(status)
                raise kind(
                    f"HTTP {status}: {error_text(body)}",
                    source=self.name,
                    query=query,
                    window=span,
                    status=status or None,
                ) from exc
            except requests.ConnectionError as exc:
                reason = _timed_out(exc)
                if reason is not None:
                    raise SourceTimeout(
                        f"no answer in time ({reason})", source=self.name, query=query, window=span
                    ) from exc
                raise translate(exc, ERRORS, source=self.name, query=query, window=span) from exc
            except Exception as exc:
                raise translate(exc, ERRORS, source=self.name, query=query, window=span) from exc
        log.debug("adapter.query", source=self.name, query=query, ms=round((time.perf_counter() - started) * 1000))
        return result

    def step(self, start: float, end: float) -> float:
        return step_for(start, end, max_points=self.max_points, min_step_s=self.min_step_s)

    async def series(self, *, query: str, start: float, end: float) -> list[MetricSeries]:
        step = self.step(start, end)
        first = math.floor(start / step) * step
        promql, name = sampled(query, step)
        result = await self._call(
            lambda: self.client.custom_query_range(promql, ts(first), ts(end), f"{step:g}s"),
            query=query,
            window=(start, end),
        )
        return self._parse_matrix(result, name, query=query)

    async def instant(self, *, query: str, at: datetime | None = None) -> list[MetricSeries]:
        params = {"time": f"{at.timestamp():.3f}"} if at else None
        result = await self._call(lambda: self.client.custom_query(query, params=params), query=query)
        try:
            return [
                MetricSeries(
                    labels=_named(item.get("metric", {}), None),
                    samples=[(float(item["value"][0]), float(item["value"][1]))],
                )
                for item in result
                if math.isfinite(float(item["value"][1]))
            ]
        except Exception as exc:
            raise translate(exc, MALFORMED, source=self.name, query=query) from exc

    def _parse_matrix(self, result: Any, name: str | None, *, query: str) -> list[MetricSeries]:
        try:
            out = []
            for item in result:
                samples = [(float(t), float(v)) for t, v in item["values"]]
                samples = [(t, v) for t, v in samples if math.isfinite(v)]
                if samples:
                    out.append(MetricSeries(labels=_named(item.get("metric", {}), name), samples=samples))
            return out
        except Exception as exc:
            raise translate(exc, MALFORMED, source=self.name, query=query, message=f"not a matrix: {exc}") from exc

    async def everything(self, *, start: float, end: float) -> list[MetricSeries]:
        found = await asyncio.gather(
            *(
                self._call(
                    partial(self.client.get_series, ts(start), ts(end), params={"match[]": match}),
                    query=f"series {match}",
                    window=(start, end),
                )
                for match in self.scan_match
            )
        )
        by_name: dict[str, set[str]] = {}
        counts: dict[str, int] = {}
        for match, label_sets in zip(self.scan_match, found, strict=True):
            for labels in label_sets:
                metric = labels.get("__name__", "")
                if not metric or metric.endswith(_SKIP_IN_SCAN):
                    continue
                by_name.setdefault(metric, set()).add(match)
                counts[metric] = counts.get(metric, 0) + 1
        names, total = [], 0
        for metric in sorted(by_name):  # whole metrics, in name order, up to the cap
            total += counts[metric]
            if total > self.scan_max_series:
                log.warning(
                    "adapter.scan_capped", source=self.name, series=sum(counts.values()), cap=self.scan_max_series
                )
                break
            names.append(metric)
        queries = [f"{metric}{match}" for metric in names for match in sorted(by_name[metric])]
        answers = await asyncio.gather(*(self.series(query=q, start=start, end=end) for q in queries))
        unique: dict[tuple[tuple[str, str], ...], MetricSeries] = {}
        for answer in answers:
            for s in answer:
                unique.setdefault(tuple(sorted(s.labels.items())), s)
        return list(unique.values())

    async def build_info(self) -> dict[str, Any]:
        return await self._call(self.client.build_info, query="status/buildinfo")


def _timed_out(exc: requests.ConnectionError) -> urllib3.exceptions.TimeoutError | None:
    """The read timeout requests reports as a connection error (with retries off, urllib3's
    ``MaxRetryError`` wraps it, and requests maps that to ``ConnectionError``)."""
    wrapped = exc.args[0] if exc.args else None
    reason = getattr(wrapped, "reason", None)
    if isinstance(reason, urllib3.exceptions.NewConnectionError):  # a refusal, though urllib3 files it under timeouts
        return None
    return reason if isinstance(reason, urllib3.exceptions.TimeoutError) else None


def _named(labels: dict[str, str], name: str | None) -> dict[str, str]:
    if "__name__" in labels:
        return dict(labels)
    return {"__name__": name or EXPRESSION_NAME, **labels}
