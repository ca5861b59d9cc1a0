"""``opsagent doctor``: can every configured source be reached, and what is misconfigured?

Each configured instance gets one :class:`Health`: reachable, version, latency of a cheap read,
and the problems found, each with how to fix it. Only read endpoints are called, with a short
timeout; a failing source is a row, never an exception.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field

from adapters.config import close_reader, reader_for
from adapters.sourceconfig import (
    AnySourceConfig,
    ElasticsearchConfig,
    GitConfig,
    HttpSourceConfig,
    KubernetesConfig,
    LokiConfig,
    PrometheusConfig,
    SourcesConfig,
    TempoConfig,
    secret_env,
)
from opsagent.errors import MalformedResponse, QueryRejected, SourceAuthFailed, SourceError, SourceTimeout


class Health(BaseModel):
    kind: str
    name: str
    target: str = Field(description="URL or path, never with credentials")
    reachable: bool
    version: str | None = None
    latency_ms: float | None = None
    problems: list[str] = Field(default_factory=list)
    fixes: list[str] = Field(default_factory=list)

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


async def _probe(config: AnySourceConfig, reader: Any, health: Health, now: datetime) -> None:
    """Version, latency and configuration checks, by kind; raises SourceError when unreachable."""
    hour_ago = now - timedelta(hours=1)
    if isinstance(config, PrometheusConfig):
        info, health.latency_ms = await _timed(reader.build_info)
        health.version = str(info.get("version")) if info.get("version") else None
        found = 0
        for match in config.scan_match:
            answer = await reader.instant(query=f"count({match})", at=now)
            found += int(answer[0].samples[0][1]) if answer else 0
        if found == 0:
            health.problems.append(f"no series carry the labels triage scans by ({', '.join(config.scan_match)})")
            health.fixes.append(
                "set scan_match: to matchers your series have, e.g. ['{job!=\"\"}', '{container!=\"\"}']"
            )
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
            health.fixes.append("check namespaces: and the RBAC of the identity (README: Kubernetes RBAC)")
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
        _, health.latency_ms = await _timed(lambda: reader.changes(start=hour_ago, end=now, service=None))


async def check(
    config: AnySourceConfig, *, environ: Mapping[str, str] | None = None, now: datetime | None = None
) -> Health:
    env = os.environ if environ is None else environ
    health = Health(kind=config.kind, name=config.name, target=_target(config), reachable=False)
    for problem, fix in missing_secrets(config, env):
        health.problems.append(problem)
        health.fixes.append(fix)
    reader = reader_for(config, env)
    try:
        await asyncio.wait_for(_probe(config, reader, health, now or datetime.now(UTC)), timeout=config.timeout_s + 1)
        health.reachable = True
    except TimeoutError:
        health.problems.append(f"no answer within {config.timeout_s:g} s")
        health.fixes.append("check the address and network, or raise timeout_s")
    except SourceError as exc:
        health.reachable = isinstance(exc, SourceAuthFailed | QueryRejected | MalformedResponse)
        health.problems.append(str(exc))
        health.fixes.append(fix_for(exc, config))
    finally:
        await close_reader(reader)
    return health


async def diagnose(
    sources: SourcesConfig, *, environ: Mapping[str, str] | None = None, now: datetime | None = None
) -> list[Health]:
    """One row per configured instance, checked concurrently."""
    return list(await asyncio.gather(*(check(c, environ=environ, now=now) for c in sources.all())))
