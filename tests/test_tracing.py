"""Traces of investigations: one trace each, with spans for triage, every hypothesis's loop, every
tool call and the judge — checked with the SDK's in-memory exporter, and end to end against a local
OTLP/HTTP receiver that ``opsagent investigate`` exports to when the environment names it."""

from __future__ import annotations

import asyncio
import gzip
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from opsagent import tracing
from opsagent.catalog import default_catalog
from opsagent.incident import open_incident
from opsagent.models import Action
from opsagent.pipeline import investigate_fixture
from opsagent.sources import Sources
from opsagent.tools import Toolbox
from opsagent.triggers import ad_hoc_alert, symptom
from tests.conftest import ORDER_INCIDENT

OPSAGENT = Path(sys.executable).with_name("opsagent")


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The engine's spans, kept in memory (a provider of the test's own, not the process's global one)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "tracer", lambda: provider.get_tracer(tracing.TRACER_NAME))
    yield exporter
    provider.shutdown()


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def test_an_investigation_is_one_trace_of_triage_hypotheses_tool_calls_and_verdicts(
    exported: InMemorySpanExporter,
) -> None:
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT))
    spans = exported.get_finished_spans()
    (root,) = named(spans, "opsagent.investigation")
    assert root.parent is None
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}
    assert root.attributes["opsagent.incident_id"] == report.incident.id
    assert root.attributes["opsagent.status"] == report.status == "confirmed"
    assert root.attributes["opsagent.root_cause"] == "order-service/config_change"

    (triage,) = named(spans, "opsagent.triage")
    assert triage.parent.span_id == root.context.span_id
    assert triage.attributes["opsagent.top_suspect"] == "order-service"

    hypotheses = named(spans, "opsagent.hypothesis")
    assert {(h.attributes["opsagent.hypothesis"], h.attributes["opsagent.verdict"]) for h in hypotheses} == {
        (r.hypothesis.id, r.verdict.status) for r in report.results
    }
    judged = named(spans, "opsagent.judge")
    assert {j.attributes["opsagent.hypothesis"] for j in judged} == {r.hypothesis.id for r in report.results}
    by_id = {s.context.span_id: s for s in spans}
    assert all(by_id[j.parent.span_id].name == "opsagent.hypothesis" for j in judged)

    calls = named(spans, "opsagent.tool_call")
    # every step of every loop is a tool call under its hypothesis, with its source and outcome
    under_hypotheses = [c for c in calls if by_id[c.parent.span_id].name == "opsagent.hypothesis"]
    assert len(under_hypotheses) == sum(len(r.steps) for r in report.results)
    assert any(by_id[c.parent.span_id].name == "opsagent.triage" for c in calls)
    for call in calls:
        assert call.attributes["opsagent.source"] in {"metrics", "logs", "changes", "traces", "kubernetes"}
        assert call.attributes["opsagent.outcome"] in {"ok", "error"}
        assert call.end_time > call.start_time


def test_a_tool_call_a_source_cannot_answer_is_an_error_span(exported: InMemorySpanExporter) -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 3, 17, 14, 30, tzinfo=UTC)
    incident = open_incident(ad_hoc_alert("checkout", symptom("latency"), now=now))
    toolbox = Toolbox(sources=Sources(), catalog=default_catalog(), incident=incident)
    action = Action(tool="metrics.signal", args={"service": "checkout", "signal": "latency_p99"})
    observation = asyncio.run(toolbox.call(action))
    assert not observation.ok
    (call,) = exported.get_finished_spans()
    assert call.name == "opsagent.tool_call"
    assert call.attributes["opsagent.outcome"] == "error"
    assert call.status.status_code is StatusCode.ERROR
    assert "no metrics source is configured" in call.status.description


def test_tracing_is_off_unless_the_environment_names_a_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*tracing.ENDPOINT_ENV, "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    assert tracing.configure_from_environment() is False


class Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector's trace endpoint: keeps every export request it is sent."""

    received: list[ExportTraceServiceRequest]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.received.append(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(b"")

    def log_message(self, *args: object) -> None:
        pass


def test_opsagent_investigate_exports_its_trace_to_an_otlp_collector(tmp_path: Path) -> None:
    received: list[ExportTraceServiceRequest] = []
    handler = type("Handler", (Receiver,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {
            **os.environ,
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}",
            "OTEL_SERVICE_NAME": "opsagent-under-test",
        }
        done = subprocess.run(
            [str(OPSAGENT), "investigate", str(ORDER_INCIDENT), "--no-live", "--no-lessons", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        server.shutdown()
        thread.join()
    assert done.returncode == 0, done.stderr
    spans = [
        (rs, span)
        for request in received
        for rs in request.resource_spans
        for scope in rs.scope_spans
        for span in scope.spans
    ]
    names = [span.name for _, span in spans]
    for expected in (
        "opsagent.investigation",
        "opsagent.triage",
        "opsagent.hypothesis",
        "opsagent.tool_call",
        "opsagent.judge",
    ):
        assert expected in names, names
    assert names.count("opsagent.investigation") == 1
    assert len({span.trace_id for _, span in spans}) == 1
    services = {a.value.string_value for rs, _ in spans for a in rs.resource.attributes if a.key == "service.name"}
    assert services == {"opsagent-under-test"}
