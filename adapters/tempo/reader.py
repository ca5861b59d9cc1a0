"""Grafana Tempo traces through its HTTP API, over httpx.

A traces *reader* (:class:`opsagent.sources.readers.TracesReader`): ``/api/search`` by service tag and
time for trace ids, then ``/api/traces/<id>`` (OTLP JSON) for each whole trace, up to a cap. Tempo
has no dependency endpoint: the call graph comes from the spans read. Read-only: it only sends GET.
The httpx client is injected; its errors are translated here, once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import httpx

from adapters.boundary import HTTPX_ERRORS, http_error, translate
from opsagent.analysis.spans import trace_edges
from opsagent.errors import MalformedResponse
from opsagent.fixtures import Edge, Span

_ERROR_CODES = ("STATUS_CODE_ERROR", 2, "2")
_OK_CODES = ("STATUS_CODE_OK", 1, "1")


class TempoReader:
    def __init__(self, client: httpx.AsyncClient, *, name: str, max_traces: int = 50, concurrency: int = 8) -> None:
        self.client = client
        self.name = f"traces:{name}"
        self.max_traces = max_traces
        self._slots = asyncio.Semaphore(concurrency)

    async def _get(self, path: str, params: Mapping[str, str | int], *, window: tuple[datetime, datetime]) -> Any:
        described = f"GET {path}"
        async with self._slots:
            try:
                response = await self.client.get(path, params=dict(params), headers={"accept": "application/json"})
            except Exception as exc:
                raise translate(exc, HTTPX_ERRORS, source=self.name, query=described, window=window) from exc
        if response.status_code == 404 and path.startswith("/api/traces/"):
            return None  # the trace aged out between search and read
        if response.is_error:
            raise http_error(response, source=self.name, query=described, window=window)
        try:
            return response.json()
        except ValueError as exc:
            raise MalformedResponse(f"not JSON: {exc}", source=self.name, query=described, window=window) from exc

    async def trace_ids(self, service: str | None, *, start: datetime, end: datetime) -> list[str]:
        params: dict[str, str | int] = {
            "start": int(start.timestamp()),
            "end": int(end.timestamp()) + 1,
            "limit": self.max_traces,
        }
        if service:
            params["tags"] = f"service.name={service}"
        body = await self._get("/api/search", params, window=(start, end))
        try:
            return [str(t["traceID"]) for t in body.get("traces") or []]
        except (KeyError, TypeError, AttributeError) as exc:
            raise MalformedResponse(
                f"not a search answer: {exc!r}", source=self.name, query="GET /api/search", window=(start, end)
            ) from exc

    async def spans(self, *, services: Sequence[str] | None, start: datetime, end: datetime) -> list[Span]:
        wanted: Sequence[str | None] = list(services) if services is not None else [None]
        found = await asyncio.gather(*(self.trace_ids(s, start=start, end=end) for s in wanted))
        ids = list(dict.fromkeys(i for group in found for i in group))
        bodies = await asyncio.gather(*(self._get(f"/api/traces/{i}", {}, window=(start, end)) for i in ids))
        out: dict[tuple[str, str], Span] = {}
        for trace_id, body in zip(ids, bodies, strict=True):
            if body is None:
                continue
            try:
                for span in otlp_spans(body, trace_id=trace_id):
                    out.setdefault((span.trace_id, span.span_id), span)
            except (KeyError, TypeError, ValueError) as exc:
                raise MalformedResponse(
                    f"not an OTLP trace: {exc!r}",
                    source=self.name,
                    query=f"GET /api/traces/{trace_id}",
                    window=(start, end),
                ) from exc
        return list(out.values())

    async def edges(self, *, start: datetime, end: datetime) -> list[Edge]:
        return trace_edges(await self.spans(services=None, start=start, end=end))

    async def build_info(self) -> dict[str, Any]:
        now = datetime.now().astimezone()
        body = await self._get("/api/status/buildinfo", {}, window=(now, now))
        return dict(body) if isinstance(body, Mapping) else {}


def otlp_spans(body: Mapping[str, Any], *, trace_id: str) -> list[Span]:
    """Tempo's trace JSON (``batches`` in v1, ``trace.resourceSpans`` in v2) as the fixture format's spans."""
    batches = body.get("batches") or body.get("resourceSpans") or (body.get("trace") or {}).get("resourceSpans") or []
    out = []
    for batch in batches:
        attrs = {a["key"]: a.get("value", {}) for a in (batch.get("resource") or {}).get("attributes", [])}
        service = str((attrs.get("service.name") or {}).get("stringValue", "unknown"))
        for scope in batch.get("scopeSpans") or batch.get("instrumentationLibrarySpans") or []:
            for s in scope.get("spans", []):
                start_ns, end_ns = int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])
                code = (s.get("status") or {}).get("code")
                out.append(
                    Span(
                        trace_id=str(s.get("traceId") or trace_id),
                        span_id=str(s["spanId"]),
                        parent_id=str(s["parentSpanId"]) if s.get("parentSpanId") else None,
                        service=service,
                        operation=str(s["name"]),
                        start=start_ns,
                        duration_us=max(end_ns - start_ns, 0) / 1000,
                        status="error" if code in _ERROR_CODES else "ok" if code in _OK_CODES else "unset",
                    )
                )
    return out
