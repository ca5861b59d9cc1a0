"""Jaeger's configuration: where its query API is and how many traces to read.

Models only: no client is imported here, so loading settings stays cheap; secrets come from the
environment (:mod:`adapters.baseconfig`)."""

from __future__ import annotations

from pydantic import Field

from adapters.baseconfig import HttpSourceConfig, Kind


class JaegerConfig(HttpSourceConfig):
    kind: Kind = "jaeger"
    max_traces: int = Field(default=200, ge=1, description="traces per service and period")
    max_services: int = Field(default=50, ge=1)
