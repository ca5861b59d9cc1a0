"""The tool layer: the only way a reasoner touches a data source.

Every tool is read-only by construction (the protocols only ask questions). The toolbox validates
arguments (a malformed call becomes a format-error observation with a hint, not an exception),
caches identical calls, enforces the per-call timeout, and turns any source failure into an
observation that names the source, so an investigation with a dead source still finishes.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from opsagent.catalog import SignalCatalog
from opsagent.errors import QueryRejected, SourceError, SourceTimeout
from opsagent.fixtures import SignalDef
from opsagent.models import (
    Action,
    ErrorData,
    Incident,
    MetricsData,
    Observation,
    ObservationData,
    SourceKind,
)
from opsagent.observations import describe, estimate_tokens
from opsagent.sources import ChangesSource, KubernetesSource, LogsSource, MetricsSource, Sources, TracesSource

log = structlog.get_logger("opsagent.tools")


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SignalArgs(_Args):
    signal: str = Field(description="a signal of the catalog, e.g. latency_p99")
    service: str


class QueryArgs(_Args):
    query: str = Field(description="a query in the source's language (PromQL selector in replay)")
    service: str


class ScanArgs(_Args):
    pass


class LogArgs(_Args):
    service: str | None = None
    text: str | None = Field(default=None, description="case-insensitive regex on the message")


class ChangeArgs(_Args):
    service: str | None = None
    before_min: float = Field(default=60, gt=0, le=24 * 60)


class TraceArgs(_Args):
    service: str | None = None


class KubeArgs(_Args):
    service: str | None = Field(default=None, description="a service (its pods by label or owner); none: all")


class KubeEventArgs(_Args):
    service: str | None = None
    reason: str | None = Field(default=None, description="an event reason, e.g. FailedScheduling, BackOff")


@dataclass(frozen=True)
class ToolSpec:
    name: str
    kind: SourceKind
    args: type[_Args]
    doc: str

    def usage(self) -> str:
        fields = ", ".join(f"{n}{'' if f.is_required() else '?'}" for n, f in self.args.model_fields.items())
        return f"{self.name}({fields})"


TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec("metrics.signal", SourceKind.metrics, SignalArgs, "a catalog signal of a service vs baseline"),
        ToolSpec("metrics.query", SourceKind.metrics, QueryArgs, "a raw metric query vs baseline"),
        ToolSpec("metrics.scan", SourceKind.metrics, ScanArgs, "every series of every component vs baseline"),
        ToolSpec("logs.summary", SourceKind.logs, LogArgs, "summary of logs: counts, templates, new/bursting"),
        ToolSpec("changes.list", SourceKind.changes, ChangeArgs, "deploys/config changes before onset"),
        ToolSpec("traces.summary", SourceKind.traces, TraceArgs, "self-time shift, slow operations, errors"),
        ToolSpec(
            "kubernetes.pods",
            SourceKind.kubernetes,
            KubeArgs,
            "pods: phase, restarts, why containers wait or ended (OOMKilled…), their events and nodes",
        ),
        ToolSpec("kubernetes.events", SourceKind.kubernetes, KubeEventArgs, "Kubernetes events, folded by reason"),
        ToolSpec("kubernetes.nodes", SourceKind.kubernetes, KubeArgs, "nodes a service runs on: conditions, events"),
    )
}


def observation_id(action: Action) -> str:
    prefix = action.tool.split(".")[0][0] if action.tool in TOOLS else "x"
    return f"{prefix}-{hashlib.sha1(action.key().encode()).hexdigest()[:6]}"


def usage() -> str:
    return "; ".join(spec.usage() for spec in TOOLS.values())


@dataclass
class Toolbox:
    """Runs tool calls for one investigation. Shared by concurrent verification loops."""

    sources: Sources
    catalog: SignalCatalog
    incident: Incident
    timeout_s: float = 3.0
    calls: int = 0
    cache_hits: int = 0
    unreadable: dict[str, str] = field(default_factory=dict)
    observations: dict[str, Observation] = field(default_factory=dict)
    _inflight: dict[str, asyncio.Task[Observation]] = field(default_factory=dict)

    async def call(self, action: Action) -> Observation:
        key = action.key()
        task = self._inflight.get(key)
        if task is not None:
            self.cache_hits += 1
            obs = await task
            return obs.model_copy(update={"cached": True})
        task = asyncio.ensure_future(self._run(action))
        self._inflight[key] = task
        return await task

    async def _run(self, action: Action) -> Observation:
        spec = TOOLS.get(action.tool)
        if spec is None:
            return self._record(action, None, _format_error(f"unknown tool {action.tool!r}"))
        try:
            args = spec.args.model_validate(action.args)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'args'}: {e['msg']}" for e in exc.errors())
            return self._record(action, spec.kind, _format_error(f"bad arguments for {spec.name}: {problems}"))
        source = getattr(self.sources, spec.kind.value)
        if source is None:
            msg = f"no {spec.kind.value} source is configured"
            self.unreadable.setdefault(spec.kind.value, msg)
            return self._record(action, spec.kind, ErrorData(error=msg))
        self.calls += 1
        log.debug("adapter.query", tool=spec.name, source=source.name, incident_id=self.incident.id)
        try:
            data = await asyncio.wait_for(self._dispatch(spec, args, source), timeout=self.timeout_s)
        except TimeoutError:
            err: SourceError = SourceTimeout(f"no answer within {self.timeout_s:g} s", source=source.name)
            return self._failed(action, spec.kind, err)
        except QueryRejected as exc:
            return self._record(action, spec.kind, ErrorData(error=str(exc), hint=f"usage: {spec.usage()}"))
        except SourceError as exc:
            return self._failed(action, spec.kind, exc)
        except Exception as exc:  # an adapter bug must not kill the investigation
            err = SourceError(f"{type(exc).__name__}: {exc}", source=source.name)
            return self._failed(action, spec.kind, err)
        return self._record(action, spec.kind, data)

    def _failed(self, action: Action, kind: SourceKind, exc: SourceError) -> Observation:
        self.unreadable.setdefault(exc.source, str(exc))
        log.warning("adapter.failed", source=exc.source, error=str(exc), incident_id=self.incident.id)
        return self._record(action, kind, ErrorData(error=f"{exc.source} could not be read: {exc}"))

    def _record(self, action: Action, kind: SourceKind | None, data: ObservationData) -> Observation:
        text = describe(data)
        obs = Observation(
            id=observation_id(action),
            action=action,
            source=kind,
            data=data,
            text=text,
            tokens=estimate_tokens(text),
        )
        self.observations[obs.id] = obs
        return obs

    def _dispatch(self, spec: ToolSpec, args: Any, source: Any) -> Awaitable[ObservationData]:
        handler: Callable[[Any, Any], Awaitable[ObservationData]] = getattr(self, "_" + spec.name.replace(".", "_"))
        return handler(args, source)

    async def _metrics_signal(self, args: SignalArgs, source: MetricsSource) -> ObservationData:
        spec = self.catalog.get(args.signal)
        if spec is None:
            known = ", ".join(sorted(self.catalog.signals))
            return _format_error(f"unknown signal {args.signal!r}", hint=f"signals: {known}")
        stats = await source.stats(
            query=self.catalog.query(args.signal, args.service),
            signal=args.signal,
            component=args.service,
            spec=spec,
            incident=self.incident,
        )
        return MetricsData(stats=[stats] if stats else [])

    async def _metrics_query(self, args: QueryArgs, source: MetricsSource) -> ObservationData:
        stats = await source.stats(
            query=args.query,
            signal=args.query,
            component=args.service,
            spec=SignalDef(query=args.query, direction="any"),
            incident=self.incident,
        )
        return MetricsData(stats=[stats] if stats else [])

    async def _metrics_scan(self, args: ScanArgs, source: MetricsSource) -> ObservationData:
        return MetricsData(stats=await source.scan(incident=self.incident))

    async def _logs_summary(self, args: LogArgs, source: LogsSource) -> ObservationData:
        return await source.summary(incident=self.incident, service=args.service, text=args.text)

    async def _changes_list(self, args: ChangeArgs, source: ChangesSource) -> ObservationData:
        return await source.changes(incident=self.incident, service=args.service, before_min=args.before_min)

    async def _traces_summary(self, args: TraceArgs, source: TracesSource) -> ObservationData:
        return await source.summary(incident=self.incident, service=args.service)

    async def _kubernetes_pods(self, args: KubeArgs, source: KubernetesSource) -> ObservationData:
        return await source.pods(incident=self.incident, service=args.service)

    async def _kubernetes_events(self, args: KubeEventArgs, source: KubernetesSource) -> ObservationData:
        return await source.events(incident=self.incident, service=args.service, reason=args.reason)

    async def _kubernetes_nodes(self, args: KubeArgs, source: KubernetesSource) -> ObservationData:
        return await source.nodes(incident=self.incident, service=args.service)


def _format_error(message: str, hint: str | None = None) -> ErrorData:
    return ErrorData(error=f"format error: {message}", hint=hint or f"use one of: {usage()}")
