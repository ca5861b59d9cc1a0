"""In-memory stand-ins for the Jaeger query API and the Tempo HTTP API, for respx.

Jaeger (the query service's HTTP JSON API, model/json shapes, https://www.jaegertracing.io/docs/latest/apis/):
``GET /api/services`` -> ``{"data": [names], "total", "limit", "offset", "errors": null}``;
``GET /api/traces?service=&start=&end=&limit=`` (microseconds) -> ``{"data": [trace]}``, a trace being
``{"traceID", "spans": [{"traceID", "spanID", "operationName", "references": [{"refType": "CHILD_OF",
"traceID", "spanID"}], "startTime" (µs), "duration" (µs), "tags": [{"key", "type", "value"}], "processID"}],
"processes": {"p1": {"serviceName", "tags"}}}``; ``GET /api/dependencies?endTs=&lookback=`` (ms) ->
``{"data": [{"parent", "child", "callCount"}]}``; errors: ``{"data": null, "errors": [{"code", "msg"}]}``.

Tempo (https://grafana.com/docs/tempo/latest/api_docs/): ``GET /api/search?tags=service.name%3Dx&start=&end=&limit=``
(seconds) -> ``{"traces": [{"traceID", "rootServiceName", "rootTraceName", "startTimeUnixNano", "durationMs"}],
"metrics": {...}}``; ``GET /api/traces/<id>`` -> OTLP JSON ``{"batches": [{"resource": {"attributes": [...]},
"scopeSpans": [{"scope": {...}, "spans": [{"traceId", "spanId", "parentSpanId", "name", "kind",
"startTimeUnixNano", "endTimeUnixNano", "status": {"code"}}]}]}]}``; an unknown id is a 404.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import respx

from opsagent.analysis.spans import trace_edges
from opsagent.fixtures import Span

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(span: Span) -> int:
    if isinstance(span.start, int):
        return span.start // 1000
    return (span.start - _EPOCH) // timedelta(microseconds=1)


class _Traces:
    def __init__(self, spans: Sequence[Span]) -> None:
        self.by_trace: dict[str, list[Span]] = defaultdict(list)
        for s in spans:
            self.by_trace[s.trace_id].append(s)
        self.spans = list(spans)
        self.requests: list[tuple[str, str]] = []

    def touching(self, service: str | None, start_us: int, end_us: int) -> list[str]:
        """Traces with a span (of the service) starting in [start, end)."""
        found = {
            s.trace_id
            for s in self.spans
            if (service is None or s.service == service) and start_us <= micros(s) < end_us
        }
        return sorted(found)


class FakeJaeger(_Traces):
    def install(self, router: respx.Router, url: str) -> None:
        router.route(host=httpx.URL(url).host).mock(side_effect=self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.path))
        q = request.url.params
        if request.url.path == "/api/services":
            names = sorted({s.service for s in self.spans})
            return httpx.Response(
                200, json={"data": names, "total": len(names), "limit": 0, "offset": 0, "errors": None}
            )
        if request.url.path == "/api/traces":
            if "service" not in q:
                return httpx.Response(
                    400,
                    json={
                        "data": None,
                        "total": 0,
                        "limit": 0,
                        "offset": 0,
                        "errors": [{"code": 400, "msg": "parameter 'service' is required"}],
                    },
                )
            ids = self.touching(q["service"], int(q["start"]), int(q["end"]))[: int(q.get("limit", 20))]
            data = [self.trace(i) for i in ids]
            return httpx.Response(200, json={"data": data, "total": len(data), "limit": 0, "offset": 0, "errors": None})
        if request.url.path == "/api/dependencies":
            edges = trace_edges(self.spans)
            data = [{"parent": e.caller, "child": e.callee, "callCount": 1} for e in edges]
            return httpx.Response(200, json={"data": data, "total": len(data), "limit": 0, "offset": 0, "errors": None})
        return httpx.Response(404, text="404 page not found\n")

    def trace(self, trace_id: str) -> dict[str, Any]:
        spans = self.by_trace[trace_id]
        processes = {name: f"p{i + 1}" for i, name in enumerate(sorted({s.service for s in spans}))}
        out = []
        for s in spans:
            tags: list[dict[str, Any]] = [{"key": "span.kind", "type": "string", "value": "server"}]
            if s.status == "error":
                tags.append({"key": "error", "type": "bool", "value": True})
            elif s.status == "ok":
                tags.append({"key": "otel.status_code", "type": "string", "value": "OK"})
            out.append(
                {
                    "traceID": s.trace_id,
                    "spanID": s.span_id,
                    "flags": 1,
                    "operationName": s.operation,
                    "references": [{"refType": "CHILD_OF", "traceID": s.trace_id, "spanID": s.parent_id}]
                    if s.parent_id
                    else [],
                    "startTime": micros(s),
                    "duration": int(s.duration_us),
                    "tags": tags,
                    "logs": [],
                    "processID": processes[s.service],
                    "warnings": None,
                }
            )
        return {
            "traceID": trace_id,
            "spans": out,
            "processes": {pid: {"serviceName": name, "tags": []} for name, pid in processes.items()},
            "warnings": None,
        }


class FakeTempo(_Traces):
    def install(self, router: respx.Router, url: str) -> None:
        router.route(host=httpx.URL(url).host).mock(side_effect=self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.path))
        q = request.url.params
        if request.url.path == "/api/search":
            service = q["tags"].split("=", 1)[1] if "tags" in q else None
            ids = self.touching(service, int(q["start"]) * 1_000_000, int(q["end"]) * 1_000_000)[
                : int(q.get("limit", 20))
            ]
            traces = [
                {
                    "traceID": i,
                    "rootServiceName": self.by_trace[i][0].service,
                    "rootTraceName": self.by_trace[i][0].operation,
                    "startTimeUnixNano": str(min(micros(s) for s in self.by_trace[i]) * 1000),
                    "durationMs": 1,
                }
                for i in ids
            ]
            return httpx.Response(
                200, json={"traces": traces, "metrics": {"inspectedTraces": len(self.by_trace), "inspectedBytes": "1"}}
            )
        if request.url.path.startswith("/api/traces/"):
            trace_id = request.url.path.rsplit("/", 1)[1]
            if trace_id not in self.by_trace:
                return httpx.Response(404, text="trace not found")
            return httpx.Response(200, json=self.trace(trace_id))
        return httpx.Response(404, text="404 page not found")

    def trace(self, trace_id: str) -> dict[str, Any]:
        by_service: dict[str, list[Span]] = defaultdict(list)
        for s in self.by_trace[trace_id]:
            by_service[s.service].append(s)
        codes = {
            "error": {"code": "STATUS_CODE_ERROR", "message": "failed"},
            "ok": {"code": "STATUS_CODE_OK"},
            "unset": {},
        }
        return {
            "batches": [
                {
                    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                    "scopeSpans": [
                        {
                            "scope": {"name": "io.opentelemetry.http"},
                            "spans": [
                                {
                                    "traceId": s.trace_id,
                                    "spanId": s.span_id,
                                    **({"parentSpanId": s.parent_id} if s.parent_id else {}),
                                    "name": s.operation,
                                    "kind": "SPAN_KIND_SERVER",
                                    "startTimeUnixNano": str(micros(s) * 1000),
                                    "endTimeUnixNano": str((micros(s) + int(s.duration_us)) * 1000),
                                    "status": codes[s.status],
                                }
                                for s in spans
                            ],
                        }
                    ],
                }
                for service, spans in sorted(by_service.items())
            ]
        }
