"""OpenTelemetry traces of investigations: one trace per investigation, a span for its triage, for
each hypothesis's loop, for each tool call (source, tool, outcome; the span's own duration) and for
the judge's verdict, so a team sees in its own tracing backend where an investigation's time went
and which source was slow.

Off by default. The engine speaks only the OpenTelemetry API (a no-op until a tracer provider is
set); :func:`configure_from_environment` sets the SDK's provider with an OTLP/HTTP exporter when
the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (the
SDK and exporter are the ``tracing`` extra). Spans carry names, ids, kinds and outcomes, never
observation contents, alert annotations or anything a secret could hide in.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import structlog
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.util.types import AttributeValue

log = structlog.get_logger("opsagent.tracing")

TRACER_NAME = "opsagent"
ENDPOINT_ENV = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_configured = False


def tracer() -> trace.Tracer:
    """The tracer of whichever provider is set when it is asked for (tests set their own)."""
    return trace.get_tracer(TRACER_NAME)


@contextmanager
def span(name: str, **attributes: AttributeValue | None) -> Iterator[Span]:
    """A span around a step of an investigation; attributes that are None are left out."""
    kept = {f"opsagent.{k}": v for k, v in attributes.items() if v is not None}
    with tracer().start_as_current_span(name, attributes=kept) as current:
        yield current


def mark_failed(current: Span, reason: str) -> None:
    """Mark a span as an error with its reason (a tool call a source could not answer)."""
    current.set_status(Status(StatusCode.ERROR, reason))


def configure_from_environment() -> bool:
    """Export traces over OTLP/HTTP when the environment names an endpoint; True when it does.
    Without the SDK installed, says how to get it and carries on untraced: an investigation
    matters more than its trace."""
    global _configured
    if _configured or not any(os.environ.get(name) for name in ENDPOINT_ENV):
        return _configured
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("tracing.unavailable", fix="pip install 'opsagent-rca[tracing]'")
        return False
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = Resource.create({"service.name": TRACER_NAME})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # endpoint, headers: the OTEL_* variables
    trace.set_tracer_provider(provider)
    _configured = True
    log.info("tracing.on")  # not the endpoint: a URL may carry credentials
    return True
