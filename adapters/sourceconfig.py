"""The ``sources:`` section of the configuration: which systems to read and how to reach them.

Instances are listed per kind (several Prometheus, several log clusters…), each named; each kind's
settings sit beside its adapter (``adapters/<adapter>/config.py``) over the common ones and the
secrets rule of :mod:`adapters.baseconfig`. Models only: no client is imported here (building is
:mod:`adapters.config`), so loading settings stays cheap.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from adapters.changes_git.config import GitConfig
from adapters.changes_http.config import ChangeFeedConfig
from adapters.elasticsearch.config import ElasticsearchConfig
from adapters.jaeger.config import JaegerConfig
from adapters.kubernetes.config import KubernetesConfig
from adapters.loki.config import LokiConfig
from adapters.prometheus.config import PrometheusConfig
from adapters.tempo.config import TempoConfig

AnySourceConfig = (
    PrometheusConfig
    | ElasticsearchConfig
    | LokiConfig
    | GitConfig
    | ChangeFeedConfig
    | JaegerConfig
    | TempoConfig
    | KubernetesConfig
)


class SourcesConfig(BaseModel):
    """Every live source, by kind. Empty: no live source (an alert then finishes with none read)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prometheus: list[PrometheusConfig] = Field(default_factory=list)
    elasticsearch: list[ElasticsearchConfig] = Field(default_factory=list)
    loki: list[LokiConfig] = Field(default_factory=list)
    git: list[GitConfig] = Field(default_factory=list)
    change_feed: list[ChangeFeedConfig] = Field(default_factory=list)
    jaeger: list[JaegerConfig] = Field(default_factory=list)
    tempo: list[TempoConfig] = Field(default_factory=list)
    kubernetes: list[KubernetesConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_names(self) -> SourcesConfig:
        for kind in type(self).model_fields:
            names = [c.name for c in getattr(self, kind)]
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{kind}: names must be unique, {', '.join(dupes)} repeated")
        return self

    def all(self) -> list[AnySourceConfig]:
        return [
            *self.prometheus,
            *self.elasticsearch,
            *self.loki,
            *self.git,
            *self.change_feed,
            *self.jaeger,
            *self.tempo,
            *self.kubernetes,
        ]

    def empty(self) -> bool:
        return not self.all()
