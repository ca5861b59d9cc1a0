"""Elasticsearch's (or OpenSearch's) configuration: where it is, which index, which fields.

Models only: no client is imported here, so loading settings stays cheap; secrets come from the
environment (:mod:`adapters.baseconfig`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from adapters.baseconfig import Kind, SourceConfig, no_credentials_in


class LogFields(BaseModel):
    """Where each part of a log record lives in the documents. Defaults: ECS."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timestamp: str = "@timestamp"
    service: str = "service.name"
    level: str = "log.level"
    message: str = "message"
    trace_id: str | None = "trace.id"
    pod: str | None = "kubernetes.pod.name"

    def wanted(self) -> list[str]:
        return [f for f in (self.timestamp, self.service, self.level, self.message, self.trace_id, self.pod) if f]


class ElasticsearchConfig(SourceConfig):
    kind: Kind = "elasticsearch"
    url: str = Field(description="without credentials: auth: api_key or basic, secrets from the environment")
    index: str = Field(default="logs-*", description="index pattern")
    flavour: Literal["elasticsearch", "opensearch"] = "elasticsearch"
    auth: Literal["none", "api_key", "basic"] = "none"
    username: str | None = None
    verify: bool | str = True
    fields: LogFields = Field(default_factory=LogFields, description="field names; ECS by default")
    max_hits: int = Field(default=10_000, ge=1, description="raw lines read per summary at most")
    page_size: int = Field(default=2_000, ge=1, le=10_000)

    @field_validator("url")
    @classmethod
    def _plain_url(cls, url: str, info: ValidationInfo) -> str:
        return no_credentials_in(url, kind="elasticsearch", name=info.data.get("name"))
