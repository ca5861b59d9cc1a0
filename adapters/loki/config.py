"""Loki's configuration: where it is, the streams to read, where each part of a record lives.

Models only: no client is imported here, so loading settings stays cheap; secrets come from the
environment (:mod:`adapters.baseconfig`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from adapters.baseconfig import HttpSourceConfig, Kind


class LokiLabels(BaseModel):
    """Where each part of a log record lives in Loki: stream labels (or labels a parser stage
    extracts). The line itself is the message. Defaults: what Grafana Alloy / Promtail's Kubernetes
    discovery and Loki's ``service_name`` detection write."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    service: str = "service_name"
    level: str | None = Field(default="detected_level", description="label (or extracted field) with the level")
    trace_id: str | None = "trace_id"
    pod: str | None = "pod"


class LokiConfig(HttpSourceConfig):
    kind: Kind = "loki"
    tenant: str | None = Field(default=None, description="X-Scope-OrgID, for a multi-tenant Loki")
    selector: str = Field(default="", description='stream matchers every query adds, e.g. namespace="prod" (no braces)')
    parser: Literal["none", "json", "logfmt"] = Field(
        default="none", description="a parser stage that extracts level / trace id from the line"
    )
    labels: LokiLabels = Field(default_factory=LokiLabels)
    max_lines: int = Field(default=10_000, ge=1, description="raw lines read per summary at most")
    page_size: int = Field(default=5_000, ge=1, le=50_000, description="lines per query_range request")

    @field_validator("selector")
    @classmethod
    def _matchers(cls, selector: str) -> str:
        if selector.strip().startswith("{"):
            raise ValueError('write the matchers without braces, e.g. namespace="prod"')
        return selector.strip()
