"""Jaeger traces through its query service's HTTP JSON API, over httpx.

A traces *reader* (:class:`opsagent.sources.readers.TracesReader`): ``/api/services``, ``/api/traces``
by service and time (``minDuration`` and ``operation`` available for narrower reads) and
``/api/dependencies`` for the call graph. Whole traces come back, so self time (a span's duration
less its children's) is computed as in replay. Read-only: it only sends GET. The httpx client is
injected; its errors are translated here, once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import httpx

from adapters.boundary import HTTPX_ERRORS, http_error, translate
from opsagent.errors import MalformedResponse
from opsagent.fixtures import Edge, Span


class JaegerReader:
    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        name: str,
        max_traces: int = 200,
        max_services: int = 50,
        concurrency: int = 4,
    ) -> None:
        self.client = client
        self.name = f"traces:{name}"
        self.max_traces = max_traces
        self.max_services = max_services
        self._slots = asyncio.Semaphore(concurrency)

    async def _get(
        self, path: str, params: Mapping[str, str | int], *, window: tuple[datetime, datetime] | None
    ) -> Any:
        described = f"GET {path}?" + "&".join(f"{k}={v}" for k, v in params.items())
        async with self._slots:
            try:
                response = await self.client.get(path, params=dict(params))
            except Exception as exc:
                raise translate(exc, HTTPX_ERRORS, source=self.name, query=described, window=window) from exc
        if response.is_error:
            raise http_error(response, source=self.name, query=described, window=window)
        try:
            body = response.json()
            errors = body.get("errors")
            if errors:
                raise ValueError(errors[0].get("msg", errors))
            return body["data"] if body["data"] is not None else []
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise MalformedResponse(
                f"not a Jaeger answer: {exc}", source=self.name, query=described, window=window
            ) from exc

    async def services(self) -> list[str]:
        data = await self._get("/api/services", {}, window=None)
        return sorted(str(s) for s in data)

    async def traces(
        self,
        service: str,
        *,
        start: datetime,
        end: datetime,
        operation: str | None = None,
        min_duration: str | None = None,
    ) -> list[dict[str, Any]]:
        params: dict[str, str | int] = {
            "service": service,
            "start": _micros(start),
            "end": _micros(end),
            "limit": self.max_traces,
        }
        if operation:
            params["operation"] = operation
        if min_duration:
            params["minDuration"] = min_duration
        data = await self._get("/api/traces", params, window=(start, end))
        return list(data)

    async def spans(self, *, services: Sequence[str] | None, start: datetime, end: datetime) -> list[Span]:
        names = list(services) if services is not None else (await self.services())[: self.max_services]
        found = await asyncio.gather(*(self.traces(s, start=start, end=end) for s in names))
        out: dict[tuple[str, str], Span] = {}
        for traces in found:
            for trace in traces:
                try:
                    for span in trace_spans(trace):
                        out.setdefault((span.trace_id, span.span_id), span)
                except (KeyError, TypeError, ValueError) as exc:
                    raise MalformedResponse(
                        f"not a Jaeger trace: {exc!r}", source=self.name, query="GET /api/traces", window=(start, end)
                    ) from exc
        return list(out.values())

    async def edges(self, *, start: datetime, end: datetime) -> list[Edge]:
        lookback = max(int((end - start).total_seconds() * 1000), 1)
        data = await self._get(
            "/api/dependencies", {"endTs": int(end.timestamp() * 1000), "lookback": lookback}, window=(start, end)
        )
        try:
            pairs = {(str(d["parent"]), str(d["child"])) for d in data}
        except (KeyError, TypeError) as exc:
            raise MalformedResponse(
                f"not a dependency list: {exc!r}", source=self.name, query="GET /api/dependencies", window=(start, end)
            ) from exc
        return [Edge(caller=a, callee=b, source="traces") for a, b in sorted(pairs) if a != b]


def _micros(ts: datetime) -> int:
    return int(ts.timestamp() * 1_000_000)


def trace_spans(trace: Mapping[str, Any]) -> list[Span]:
    """A Jaeger trace (``{traceID, spans, processes}``) as the fixture format's spans."""
    processes = trace.get("processes") or {}
    out = []
    for s in trace["spans"]:
        refs = s.get("references") or []
        parent = next((r for r in refs if r.get("refType") == "CHILD_OF"), refs[0] if refs else None)
        process = processes.get(s.get("processID"), s.get("process") or {})
        out.append(
            Span(
                trace_id=str(s["traceID"]),
                span_id=str(s["spanID"]),
                parent_id=str(parent["spanID"]) if parent else None,
                service=str(process.get("serviceName", "unknown")),
                operation=str(s["operationName"]),
                start=int(s["startTime"]) * 1000,
                duration_us=float(s["duration"]),
                status=_status(s.get("tags") or []),
            )
        )
    return out


def _status(tags: Sequence[Mapping[str, Any]]) -> str:
    values = {t.get("key"): t.get("value") for t in tags}
    if values.get("error") in (True, "true") or str(values.get("otel.status_code", "")).upper() == "ERROR":
        return "error"
    if str(values.get("otel.status_code", "")).upper() == "OK":
        return "ok"
    return "unset"
