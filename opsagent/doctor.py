"""``opsagent doctor``: can every configured source be reached, and what is misconfigured?

Each configured instance gets one :class:`Health`: reachable, version, latency of a cheap read,
and the problems found, each with how to fix it. Only read endpoints are called, with a short
timeout; a failing source is a row, never an exception.

What a source holds is checked over a time range (:class:`TimeRange`): the one an investigation
would read around ``--at`` (an hour before to half an hour after), by default the last ninety
minutes. A Prometheus holding last week's incident is not empty; asked about now it is, and says so.
For Prometheus, each core signal (the alerting signals of latency, errors and traffic) is checked to
resolve for at least one service, with the query to fix when it does not.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field

from adapters.baseconfig import HttpSourceConfig, secret_env
from adapters.changes_git.config import GitConfig
from adapters.config import close_reader, live_catalog, reader_for
from adapters.elasticsearch.config import ElasticsearchConfig
from adapters.kubernetes.config import KubernetesConfig
from adapters.loki.config import LokiConfig
from adapters.prometheus.config import PrometheusConfig
from adapters.sourceconfig import AnySourceConfig, SourcesConfig
from adapters.tempo.config import TempoConfig
from opsagent.catalog import SignalCatalog
from opsagent.errors import (
    AnswerTooLarge,
    MalformedResponse,
    QueryRejected,
    SourceAuthFailed,
    SourceError,
    SourceTimeout,
)
from opsagent.incident import DEFAULT_AFTER, DEFAULT_BEFORE
from opsagent.models import TimeRange
from opsagent.sources.kubernetes import READ

#: The signals an alert is about (latency, errors, traffic): each must resolve for some service.
CORE_SIGNALS: tuple[str, ...] = ("latency_p99", "error_ratio", "request_rate")
#: The resolution of the subqueries that check a signal over the range.
STEP_S = 60

_SERVICE_MATCHER = re.compile(r'(\w+)\s*(=~|=)\s*"([^"]*)\$service([^"]*)"')


class SignalCheck(BaseModel):
    """Whether a core signal's query answers for any service over the range."""

    signal: str
    query: str = Field(description="the catalog's query, $service standing for the service")
    asked: str = Field(description="what was sent: the query for any service, over the range")
    series: int = 0

    @property
    def resolves(self) -> bool:
        return self.series > 0


class Health(BaseModel):
    kind: str
    name: str
    target: str = Field(description="URL or path, never with credentials")
    reachable: bool
    version: str | None = None
    latency_ms: float | None = None
    problems: list[str] = Field(default_factory=list)
    fixes: list[str] = Field(default_factory=list)
    signals: list[SignalCheck] = Field(default_factory=list, description="core signals (Prometheus)")
    readable: list[str] = Field(
        default_factory=list, description="Kubernetes: the object kinds these credentials may list"
    )

    @property
    def ok(self) -> bool:
        return self.reachable and not self.problems


def _target(config: AnySourceConfig) -> str:
    if isinstance(config, GitConfig):
        return str(config.path)
    if isinstance(config, KubernetesConfig):
        where = config.context or "current context" if config.auth != "in_cluster" else "service account"
        return f"{config.auth}: {config.kubeconfig or where}"
    return config.url


def missing_secrets(config: AnySourceConfig, environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """(problem, fix) for each secret the configured auth needs and the environment lacks."""
    out = []
    needed: list[tuple[str, str]] = []
    if isinstance(config, HttpSourceConfig):
        if config.auth == "bearer":
            needed.append(("token", "bearer auth"))
        if config.auth == "basic":
            needed.append(("password", "basic auth"))
            if not config.username:
                out.append(("basic auth without a username", "set username: in the source's config"))
    if isinstance(config, ElasticsearchConfig):
        if config.auth == "api_key":
            needed.append(("api_key", "API-key auth"))
        if config.auth == "basic":
            needed.append(("password", "basic auth"))
    for secret, what in needed:
        var = secret_env(config.kind, config.name, secret)  # type: ignore[arg-type]
        if not environ.get(var):
            out.append(
                (f"{what} is configured but {var} is not set", f"export {var}=… (secrets come from the environment)")
            )
    return out


def fix_for(exc: SourceError, config: AnySourceConfig) -> str:
    """How to fix what a failed read says."""
    text = str(exc)
    if isinstance(exc, SourceAuthFailed):
        return "the credentials were refused: check the auth setting and the OPSAGENT_…_TOKEN/PASSWORD/API_KEY variable"
    if isinstance(exc, SourceTimeout):
        return f"no answer within {config.timeout_s:g} s: check the address and network, or raise timeout_s"
    if "certificate" in text.lower() or "ssl" in text.lower() or "tls" in text.lower():
        return "TLS verification failed: set verify: to the CA bundle path (or false, for a test system only)"
    if exc.status is not None and exc.status >= 500:
        return f"{_target(config)} answered HTTP {exc.status}: it is up but failing; see its own logs"
    if isinstance(exc, AnswerTooLarge):
        return "the answer passed the size cap: narrow the query (selector, index pattern) or the range"
    if isinstance(exc, MalformedResponse):
        return f"the answer is not what a {config.kind} API returns: does the address point at one?"
    if isinstance(exc, QueryRejected):
        return "the source refused a query: check field names, index pattern and matchers in the config"
    if "HTTP 404" in text:
        return "not found: check the URL (and path prefix) or the index pattern"
    if isinstance(config, GitConfig):
        return "check that path is a git clone and ref exists (git -C PATH rev-parse REF)"
    return f"cannot reach {_target(config)}: check the address and that the server is up"


async def _timed(fn: Callable[[], Awaitable[Any]]) -> tuple[Any, float]:
    started = time.perf_counter()
    result = await fn()
    return result, (time.perf_counter() - started) * 1000


def for_any_service(query: str) -> str:
    """The query with ``$service`` matching every service (``service="$service"`` -> ``=~".+"``)."""

    def widen(m: re.Match[str]) -> str:
        before, after = m.group(3), m.group(4)
        if m.group(2) == "=":
            before, after = re.escape(before), re.escape(after)
        return f'{m.group(1)}=~"{before}.+{after}"'

    return _SERVICE_MATCHER.sub(widen, query).replace("$service", ".+")


def _span(span: TimeRange) -> str:
    return f"{span.start:%Y-%m-%d %H:%M} to {span.end:%Y-%m-%d %H:%M} UTC"


async def _count(reader: Any, query: str, at: datetime) -> int:
    answer = await reader.instant(query=query, at=at)
    return int(answer[0].samples[0][1]) if answer else 0


async def _prometheus(config: PrometheusConfig, reader: Any, health: Health, span: TimeRange, catalog: Any) -> None:
    seconds = max(int((span.end - span.start).total_seconds()), STEP_S)
    found = 0
    for match in config.scan_match:
        found += await _count(reader, f"count(last_over_time({match}[{seconds}s]))", span.end)
    if found == 0:
        health.problems.append(
            f"no series carry the labels triage scans by ({', '.join(config.scan_match)}) from {_span(span)}"
        )
        health.fixes.append(
            "set scan_match: to matchers your series have, e.g. ['{job!=\"\"}', '{container!=\"\"}']; "
            "if the data is from another time, check there with --at"
        )
    for signal in CORE_SIGNALS:
        if signal not in catalog:
            continue
        query = catalog.signals[signal].query
        asked = f"count(count_over_time(({for_any_service(query)})[{seconds}s:{STEP_S}s]))"
        check = SignalCheck(signal=signal, query=query, asked=asked, series=await _count(reader, asked, span.end))
        health.signals.append(check)
        if not check.resolves:
            health.problems.append(f"{signal} resolves for no service from {_span(span)}")
            health.fixes.append(
                f"set signals.{signal}.query: in the config to PromQL your metrics answer, with $service "
                f"for the service (now: {query})"
            )


async def _probe(config: AnySourceConfig, reader: Any, health: Health, span: TimeRange, catalog: Any) -> None:
    """Version, latency and configuration checks, by kind; raises SourceError when unreachable."""
    if isinstance(config, PrometheusConfig):
        info, health.latency_ms = await _timed(reader.build_info)
        health.version = str(info.get("version")) if info.get("version") else None
        await _prometheus(config, reader, health, span, catalog)
    elif isinstance(config, ElasticsearchConfig):
        info, health.latency_ms = await _timed(reader.server_info)
        version = info.get("version") or {}
        health.version = " ".join(str(v) for v in (version.get("distribution"), version.get("number")) if v) or None
        for missing in await reader.missing_fields():
            health.problems.append(f"no field {missing!r} in {config.index}")
            health.fixes.append("set fields: to the names your documents use (ECS defaults: @timestamp, service.name…)")
    elif isinstance(config, GitConfig):
        head, health.latency_ms = await _timed(lambda: reader.git(["log", "-1", "--format=%h %cI", config.ref]))
        health.version = head.strip() or None
        paths = await reader.git(["log", "-200", "--name-only", "--format=", config.ref])
        if paths.strip() and not any(r.match(p) for p in paths.split() for r in config.rules):
            health.problems.append("no path changed in the last 200 commits matches a rule")
            health.fixes.append("check rules: patterns such as apps/{service}/** against `git log --name-only`")
    elif isinstance(config, LokiConfig):
        info, health.latency_ms = await _timed(reader.build_info)
        health.version = str(info.get("version")) if info.get("version") else None
    elif isinstance(config, KubernetesConfig):
        info, health.latency_ms = await _timed(reader.version)
        health.version = str(info.get("gitVersion")) if info.get("gitVersion") else None
        pods = await reader.objects(kind="Pod")
        if not pods:
            health.problems.append("no pods visible in " + (", ".join(config.namespaces) or "any namespace"))
            health.fixes.append("check namespaces: and the RBAC of the identity (docs/sources.md: the RBAC it needs)")
        await _kube_kinds(reader, health)
    elif isinstance(config, TempoConfig):
        info, health.latency_ms = await _timed(reader.build_info)
        health.version = str(info.get("version")) if info.get("version") else None
    elif config.kind == "jaeger":
        services, health.latency_ms = await _timed(reader.services)
        health.version = f"{len(services)} services"
        if not services:
            health.problems.append("Jaeger knows no service")
            health.fixes.append("check that traces are being sent and that url is the query service (port 16686)")
    else:  # a change feed
        _, health.latency_ms = await _timed(lambda: reader.changes(start=span.start, end=span.end, service=None))


async def _kube_kinds(reader: Any, health: Health) -> None:
    """Which of the kinds an investigation reads these credentials may list (RBAC): each one tried,
    the refused ones named with the API's answer; pods were read already."""
    health.readable.append("Pod")
    for kind in READ[1:]:
        try:
            await reader.objects(kind=kind)
        except SourceError as exc:
            health.problems.append(f"cannot list {kind}: {exc}")
            health.fixes.append(f"grant get, list and watch on {kind} to the identity (docs/kubernetes.md: RBAC)")
        else:
            health.readable.append(kind)


def investigated_range(at: datetime | None = None, *, now: datetime | None = None) -> TimeRange:
    """What an investigation with its onset at ``at`` reads (an hour before to half an hour after,
    never past now); without ``at``, the last ninety minutes."""
    now = now or datetime.now(UTC)
    if at is None:
        return TimeRange(start=now - DEFAULT_BEFORE - DEFAULT_AFTER, end=now)
    end = min(at + DEFAULT_AFTER, now)
    return TimeRange(start=min(at - DEFAULT_BEFORE, end - timedelta(minutes=1)), end=end)


async def check(
    config: AnySourceConfig,
    *,
    environ: Mapping[str, str] | None = None,
    now: datetime | None = None,
    span: TimeRange | None = None,
    catalog: SignalCatalog | None = None,
) -> Health:
    env = os.environ if environ is None else environ
    span = span or investigated_range(now=now)
    catalog = catalog if catalog is not None else live_catalog()
    health = Health(kind=config.kind, name=config.name, target=_target(config), reachable=False)
    for problem, fix in missing_secrets(config, env):
        health.problems.append(problem)
        health.fixes.append(fix)
    reader = reader_for(config, env)
    try:
        await asyncio.wait_for(_probe(config, reader, health, span, catalog), timeout=config.timeout_s + 1)
        health.reachable = True
    except TimeoutError:
        health.problems.append(f"no answer within {config.timeout_s:g} s")
        health.fixes.append("check the address and network, or raise timeout_s")
    except SourceError as exc:
        # it answered (an error status, or something that is not its API): reached, and failing
        health.reachable = exc.status is not None or isinstance(
            exc, SourceAuthFailed | QueryRejected | MalformedResponse | AnswerTooLarge
        )
        health.problems.append(str(exc))
        health.fixes.append(fix_for(exc, config))
    finally:
        await close_reader(reader)
    return health


async def diagnose(
    sources: SourcesConfig,
    *,
    environ: Mapping[str, str] | None = None,
    now: datetime | None = None,
    span: TimeRange | None = None,
    catalog: SignalCatalog | None = None,
) -> list[Health]:
    """One row per configured instance, checked concurrently over ``span``."""
    return list(
        await asyncio.gather(*(check(c, environ=environ, now=now, span=span, catalog=catalog) for c in sources.all()))
    )
