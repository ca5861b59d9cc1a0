"""An HTTP JSON change feed's configuration: how it is asked, where each change field is.

Models only: no client is imported here, so loading settings stays cheap; secrets come from the
environment (:mod:`adapters.baseconfig`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from adapters.baseconfig import HttpSourceConfig, Kind, credential_headers, refuse_in_file

TimeFormat = Literal["rfc3339", "unix", "unix_ms"]


class FeedFields(BaseModel):
    """Dotted paths of each change field within one item of the feed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = "id"
    ts: str = "timestamp"
    end: str | None = None
    service: str = "service"
    kind: str | None = "kind"
    summary: str = "summary"
    author: str | None = "author"
    from_version: str | None = "from_version"
    to_version: str | None = "to_version"
    diff: str | None = None
    steps: str | None = Field(default=None, description="the list of a rollout's steps within an item")
    step_ts: str = Field(default="timestamp", description="when a step completed, within a step")
    step_weight: str | None = Field(default="weight", description="percent on the new version after it, in a step")
    step_pods: str | None = Field(default="pods", description="the new version's pods it started, in a step")
    pods: str | None = Field(default=None, description="a mapping version -> its pods, within an item")
    url: str | None = Field(default=None, description="the change's page (a deploy, a pull request), for links")


class FeedQuery(BaseModel):
    """How the feed is asked: path, parameter names, time format, where the list is."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = ""
    items: str = Field(default="", description="dotted path of the list in the answer; empty: the answer is the list")
    since_param: str = "since"
    until_param: str = "until"
    service_param: str | None = None
    time_format: TimeFormat = "rfc3339"
    params: dict[str, str] = Field(default_factory=dict, description="fixed extra query parameters (no secrets)")
    kinds: dict[str, str] = Field(default_factory=dict, description="the feed's kind names -> deploy, config, …")
    default_kind: str = "deploy"


class ChangeFeedConfig(HttpSourceConfig):
    kind: Kind = "change_feed"
    query: FeedQuery = Field(default_factory=FeedQuery)
    fields: FeedFields = Field(default_factory=FeedFields)

    @field_validator("query")
    @classmethod
    def _no_credential_params(cls, query: FeedQuery, info: ValidationInfo) -> FeedQuery:
        found = credential_headers(query.params)
        if found:
            raise refuse_in_file(
                f"params {', '.join(found)} carry a credential",
                kind="change_feed",
                name=info.data.get("name"),
                secret="token",
                how="auth: bearer",
            )
        return query
