"""Prometheus's configuration: where it is and how much one investigation may ask of it.

Models only: no client is imported here, so loading settings stays cheap; secrets come from the
environment (:mod:`adapters.baseconfig`)."""

from __future__ import annotations

from pydantic import Field, field_validator

from adapters.baseconfig import HttpSourceConfig, Kind

#: Where triage's scan looks: series carrying one of the labels that name a component.
DEFAULT_SCAN_MATCH = ('{service!=""}', '{app!=""}', '{application!=""}', '{service_name!=""}', '{callee!=""}')


class PrometheusConfig(HttpSourceConfig):
    kind: Kind = "prometheus"
    max_points: int = Field(default=300, ge=10, description="points per range query at most")
    min_step_s: float = Field(default=60.0, gt=0, description="at least the scrape interval")
    scan_match: list[str] = Field(default_factory=lambda: list(DEFAULT_SCAN_MATCH), min_length=1)
    scan_max_series: int = Field(default=5000, ge=1)
    concurrency: int = Field(default=4, ge=1, le=64)

    @field_validator("scan_match")
    @classmethod
    def _matchers_only(cls, matches: list[str]) -> list[str]:
        for m in matches:
            if not (m.startswith("{") and m.endswith("}")):
                raise ValueError(f'{m!r}: write label matchers only, e.g. {{service!=""}}')
        return matches
