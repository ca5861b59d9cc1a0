"""The ``sources:`` section of the configuration: which systems to read and how to reach them.

Instances are listed per kind (several Prometheus, several log clusters…), each named. Secrets never
live in the file: each comes from the environment as ``OPSAGENT_<KIND>_<NAME>_<SECRET>`` (e.g.
``OPSAGENT_PROMETHEUS_MAIN_TOKEN``, ``OPSAGENT_ELASTICSEARCH_LOGS_API_KEY``, see :func:`secret_env`),
and a secret written in the file is refused with the variable to set instead: a secret-named key,
a credential header (``Authorization``, ``X-Api-Key``…), a URL with user info or a token in its
query. The refusal names the setting and never repeats the value. Models only: no
client is imported here (building is :mod:`adapters.config`), so loading settings stays cheap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from opsagent.redaction import CREDENTIAL_NAME

Kind = Literal[
    "prometheus", "elasticsearch", "loki", "git", "change_feed", "jaeger", "tempo", "kubernetes", "alertmanager"
]
Secret = Literal["token", "password", "api_key"]
ChangeKind = Literal["deploy", "rollout", "config", "flag", "infra", "scale"]
TimeFormat = Literal["rfc3339", "unix", "unix_ms"]
_SECRET_KEYS = {"token", "password", "api_key", "apikey", "secret", "bearer", "bearer_token", "credentials"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
#: Where triage's scan looks: series carrying one of the labels that name a component.
DEFAULT_SCAN_MATCH = ('{service!=""}', '{app!=""}', '{application!=""}', '{service_name!=""}', '{callee!=""}')
#: Files whose changed lines are worth showing whole: configuration, not code.
CONFIG_FILES = ("*.yaml", "*.yml", "*.json", "*.properties", "*.toml", "*.ini", "*.env", "*.conf", "*.tf", "*.hcl")


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


class PathRule(BaseModel):
    """Files matching ``pattern`` belong to a service: ``{service}`` in the pattern captures it
    (``apps/{service}/**``), or ``service`` names it (``infra/**`` -> platform)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pattern: str
    service: str | None = None
    kind: ChangeKind | None = None

    def match(self, path: str) -> str | None:
        found = _compiled(self.pattern).fullmatch(path)
        if found is None:
            return None
        return found.groupdict().get("service") or self.service


def _compiled(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("{service}", i):
            out += r"(?P<service>[^/]+)"
            i += len("{service}")
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out)


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


#: Header and query-parameter names that carry credentials.
_CREDENTIAL_NAME = re.compile(
    r"(?i)^(?:proxy-)?authorization$|^cookie$|key|secret|token|passw|pwd|signature|credential"
)


def credentials_in_url(url: str) -> str | None:
    """What in a URL is a credential (user info, a token in the query), or None. Never the value."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        return "holds credentials (user info before @)"
    named = sorted({k for k, _ in parse_qsl(parts.query, keep_blank_values=True) if CREDENTIAL_NAME.search(k)})
    if named:
        return f"holds a credential in its query ({', '.join(named)})"
    return None


def credential_headers(headers: Mapping[str, str]) -> list[str]:
    """The names of headers that carry credentials."""
    return sorted(k for k in headers if CREDENTIAL_NAME.search(k))


def _refuse_in_file(what: str, *, kind: str, name: object, secret: Secret, how: str) -> ValueError:
    return ValueError(
        f"{what}: secrets are read from the environment only; remove it from the file, set {how} "
        f"and {secret_env(kind, str(name or 'NAME'), secret)}"
    )


def secret_env(kind: str, name: str, secret: Secret) -> str:
    """The environment variable a secret of a configured source is read from."""
    return f"OPSAGENT_{kind}_{name}_{secret}".upper().replace("-", "_")


class SourceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Kind = "prometheus"  # set by each subclass; not read from the file

    name: str = Field(description="unique within its kind; names the source in reports and its secrets")
    timeout_s: float = Field(default=10.0, gt=0, description="per HTTP request (the tool layer has its own per call)")
    rate_limit_per_s: float | None = Field(default=None, gt=0, description="reads a second at most (bursts of as many)")

    @model_validator(mode="before")
    @classmethod
    def _no_secrets(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            if "kind" in data and data["kind"] != cls.model_fields["kind"].default:
                raise ValueError("kind is given by the section the source is listed under")
            found = sorted(k for k in data if str(k).lower() in _SECRET_KEYS)
            if found:
                name = data.get("name", "NAME")
                kind = cls.model_fields["kind"].default
                secret: Secret = "api_key" if "api_key" in found else "password" if "password" in found else "token"
                raise ValueError(
                    f"{', '.join(found)}: secrets are read from the environment only; remove them from the file "
                    f"and set {secret_env(kind, str(name), secret)}"
                )
        return data

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        if not _NAME.match(name):
            raise ValueError("use letters, digits, - and _ (it becomes part of environment variable names)")
        return name

    def secret(self, secret: Secret, environ: Mapping[str, str]) -> str | None:
        return environ.get(secret_env(self.kind, self.name, secret)) or None


def _no_credentials_in(url: str, *, kind: str, name: object) -> str:
    problem = credentials_in_url(url)
    if problem is None:
        return url
    basic = "user info" in problem
    raise _refuse_in_file(
        problem,
        kind=kind,
        name=name,
        secret="password" if basic else "token",
        how="auth: basic with username:" if basic else "auth: bearer",
    )


class HttpSourceConfig(SourceConfig):
    url: str
    auth: Literal["none", "bearer", "basic"] = "none"
    username: str | None = Field(default=None, description="for basic auth; the password comes from the environment")
    verify: bool | str = Field(default=True, description="TLS: verify (true), do not (false), or a CA bundle path")
    headers: dict[str, str] = Field(default_factory=dict, description="extra headers, e.g. X-Scope-OrgID (no secrets)")

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str, info: ValidationInfo) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return _no_credentials_in(url, kind=cls.model_fields["kind"].default, name=info.data.get("name")).rstrip("/")

    @field_validator("headers")
    @classmethod
    def _no_credential_headers(cls, headers: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        found = credential_headers(headers)
        if found:
            kind = cls.model_fields["kind"].default
            raise _refuse_in_file(
                f"{', '.join(found)} carries a credential",
                kind=kind,
                name=info.data.get("name"),
                secret="token",
                how="auth: bearer",
            )
        return headers

    def credentials(self, environ: Mapping[str, str]) -> tuple[str | None, tuple[str, str] | None]:
        """(bearer token, basic (user, password)) as configured."""
        if self.auth == "bearer":
            return self.secret("token", environ), None
        if self.auth == "basic":
            return None, (self.username or "", self.secret("password", environ) or "")
        return None, None


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
        return _no_credentials_in(url, kind="elasticsearch", name=info.data.get("name"))


class GitConfig(SourceConfig):
    kind: Kind = "git"
    path: Path = Field(description="a clone of the GitOps/config repository, kept fresh by someone else")
    ref: str = "HEAD"
    rules: list[PathRule] = Field(min_length=1, description="which paths belong to which service")
    config_files: list[str] = Field(default_factory=lambda: list(CONFIG_FILES))
    commit_url: str | None = Field(
        default=None,
        description="a commit's page, {sha} standing for its hash; by default derived from the origin remote "
        "(GitHub, GitLab, Bitbucket, Gitea)",
    )


class ChangeFeedConfig(HttpSourceConfig):
    kind: Kind = "change_feed"
    query: FeedQuery = Field(default_factory=FeedQuery)
    fields: FeedFields = Field(default_factory=FeedFields)

    @field_validator("query")
    @classmethod
    def _no_credential_params(cls, query: FeedQuery, info: ValidationInfo) -> FeedQuery:
        found = credential_headers(query.params)
        if found:
            raise _refuse_in_file(
                f"params {', '.join(found)} carry a credential",
                kind="change_feed",
                name=info.data.get("name"),
                secret="token",
                how="auth: bearer",
            )
        return query


class JaegerConfig(HttpSourceConfig):
    kind: Kind = "jaeger"
    max_traces: int = Field(default=200, ge=1, description="traces per service and period")
    max_services: int = Field(default=50, ge=1)


class TempoConfig(HttpSourceConfig):
    kind: Kind = "tempo"
    max_traces: int = Field(default=50, ge=1, description="traces per service and period (each one a request)")


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


class KubernetesConfig(SourceConfig):
    """A cluster, read-only. Credentials: a kubeconfig (its current context, or ``context``), or the
    pod's service account when opsagent runs in the cluster; ``auto`` tries the kubeconfig first."""

    kind: Kind = "kubernetes"
    auth: Literal["auto", "kubeconfig", "in_cluster"] = "auto"
    kubeconfig: Path | None = Field(default=None, description="default: $KUBECONFIG, else ~/.kube/config")
    context: str | None = None
    serviceaccount: Path = Field(
        default=Path("/var/run/secrets/kubernetes.io/serviceaccount"), description="the mounted service-account token"
    )
    namespaces: list[str] = Field(
        default_factory=list, description="namespaces to read; empty: all (needs a ClusterRole, see docs/sources.md)"
    )
    service_labels: list[str] = Field(
        default_factory=lambda: ["app.kubernetes.io/name", "app", "k8s-app", "service", "app.kubernetes.io/instance"],
        min_length=1,
        description="pod labels naming the service, tried in order (then the owning workload's name)",
    )
    argo_rollouts: bool = Field(default=True, description="read Argo Rollouts' history too (where the CRD exists)")


class AlertmanagerConfig(HttpSourceConfig):
    """The Alertmanager ``opsagent alerts`` and ``investigate --alert`` read what is firing from (its v2
    API). Not a telemetry source: a source of triggers. Token or password: ``OPSAGENT_ALERTMANAGER_MAIN_*``."""

    kind: Kind = "alertmanager"
    name: str = "main"


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
