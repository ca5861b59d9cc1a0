"""The tool layer: the only way a reasoner touches a data source.

Every tool is read-only by construction (the protocols only ask questions). The toolbox validates
arguments (a malformed call becomes a format-error observation with a hint, not an exception),
caches identical calls, enforces the per-call timeout and the investigation's wall-clock budget
(a call gets no more time than the budget has left, and none once it is spent), and turns any
source failure into an observation that names the source, so an investigation with a dead source
still finishes. Every instance that failed is named among the sources that could not be read,
whether or not another instance of its kind answered (:mod:`opsagent.calls`).

It is also the door everything a source returns comes through: each observation is redacted
(:func:`opsagent.redaction.scrub_model`) before a reasoner, the judge, a report, the store or a
model can see it.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from opsagent.analysis.changes import ROLLING
from opsagent.calls import tool_call
from opsagent.catalog import SignalCatalog
from opsagent.errors import QueryRejected, SourceError, SourceTimeout
from opsagent.fixtures import SignalDef
from opsagent.models import (
    Action,
    ChangeRecord,
    ChangesData,
    ErrorData,
    Incident,
    MetricsData,
    Observation,
    ObservationData,
    SourceKind,
)
from opsagent.observations import describe
from opsagent.redaction import redact, redactors, scrub_model
from opsagent.sources import ChangesSource, KubernetesSource, LogsSource, MetricsSource, Sources, TracesSource
from opsagent.tokens import estimate_tokens
from opsagent.tracing import mark_failed, span

if TYPE_CHECKING:
    from opsagent.environment import EnvironmentMemory
    from opsagent.loop import WorkClock

log = structlog.get_logger("opsagent.tools")
T = TypeVar("T")

#: How far before onset the version comparison looks for the service's rollout (minutes): as far as
#: triage looks for changes.
ROLLOUT_LOOKBACK_MIN = 60

#: What a call is told when the investigation's wall-clock budget is spent before it is made.
BUDGET_SPENT = "not called: the investigation's wall-clock budget is spent"


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SignalArgs(_Args):
    signal: str = Field(description="a signal of the catalog, e.g. latency_p99")
    service: str


class QueryArgs(_Args):
    query: str = Field(description="a query in the source's language (PromQL selector in replay)")
    service: str


class VersionArgs(_Args):
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
    #: the kind of evidence its observations are, when not the kind of source it reads
    evidence: SourceKind | None = None

    @property
    def observed_as(self) -> SourceKind:
        return self.evidence or self.kind

    def usage(self) -> str:
        fields = ", ".join(f"{n}{'' if f.is_required() else '?'}" for n, f in self.args.model_fields.items())
        return f"{self.name}({fields})"


TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec("metrics.signal", SourceKind.metrics, SignalArgs, "a catalog signal of a service vs baseline"),
        ToolSpec("metrics.query", SourceKind.metrics, QueryArgs, "a raw metric query vs baseline"),
        ToolSpec("metrics.scan", SourceKind.metrics, ScanArgs, "every series of every component vs baseline"),
        ToolSpec(
            "metrics.versions",
            SourceKind.metrics,
            VersionArgs,
            "a rollout's new version's pods against the old's, same minutes",
            evidence=SourceKind.versions,
        ),
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
    #: seconds left of the investigation's wall-clock budget (None: no budget but the per-call timeout)
    remaining: Callable[[], float] | None = None
    #: a replay's work clock: each call is charged to it, and no call is timed out (a replay
    #: source computes from the recording; how long that takes says nothing about the incident)
    work: WorkClock | None = None
    #: what this environment's past incidents taught (usual evidence, past causes): triage's one hook
    environment: EnvironmentMemory | None = None
    calls: int = 0
    cache_hits: int = 0
    unreadable: dict[str, str] = field(default_factory=dict)
    observations: dict[str, Observation] = field(default_factory=dict)
    _inflight: dict[str, asyncio.Task[Observation]] = field(default_factory=dict)

    async def call(self, action: Action) -> Observation:
        spec = TOOLS.get(action.tool)
        with span("opsagent.tool_call", tool=action.tool, source=spec.kind.value if spec else None) as traced:
            obs = await self._call(action)
            traced.set_attributes({"opsagent.outcome": "ok" if obs.ok else "error", "opsagent.cached": obs.cached})
            if not obs.ok:
                mark_failed(traced, str(getattr(obs.data, "error", "error"))[:200])  # as the report shows it
            return obs

    async def _call(self, action: Action) -> Observation:
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
            return self._record(action, spec.observed_as, _format_error(f"bad arguments for {spec.name}: {problems}"))
        source = getattr(self.sources, spec.kind.value)
        if source is None:
            msg = f"no {spec.kind.value} source is configured"
            self.unreadable.setdefault(spec.kind.value, msg)
            return self._record(action, spec.observed_as, ErrorData(error=msg))
        limit = self.time_for_a_call()
        if limit <= 0:
            return self._record(action, spec.observed_as, ErrorData(error=BUDGET_SPENT))
        self.calls += 1
        if self.work is not None:
            self.work.charge()
        log.debug("adapter.query", tool=spec.name, source=source.name, incident_id=self.incident.id)
        with tool_call(seconds=self._timed(limit)) as partial:
            try:
                data = await asyncio.wait_for(self._dispatch(spec, args, source), timeout=self._timed(limit))
            except TimeoutError:
                err: SourceError = SourceTimeout(self._no_answer(limit), source=source.name)
                return self._failed(action, spec.observed_as, err)
            except QueryRejected as exc:
                hint = f"usage: {spec.usage()}"
                return self._record(action, spec.observed_as, ErrorData(error=str(exc), hint=hint))
            except SourceError as exc:
                return self._failed(action, spec.observed_as, exc)
            except Exception as exc:  # an adapter bug must not kill the investigation
                err = SourceError(f"{type(exc).__name__}: {exc}", source=source.name)
                return self._failed(action, spec.observed_as, err)
            finally:
                self._account(partial)
        return self._record(action, spec.observed_as, data)

    def _timed(self, limit: float) -> float | None:
        """The timeout a call is held to: none in a replay (its budget counts work, not seconds)."""
        return None if self.work is not None else limit

    def time_for_a_call(self) -> float:
        """The per-call timeout, or less when the wall-clock budget has less left."""
        left = self.remaining() if self.remaining is not None else math.inf
        return min(self.timeout_s, left)

    def _no_answer(self, limit: float) -> str:
        if limit < self.timeout_s:
            return f"no answer within the {limit:.2g} s the wall-clock budget had left"
        return f"no answer within {self.timeout_s:g} s"

    async def bounded(self, source: str, read: Awaitable[T], default: T) -> T:
        """A read the engine makes of a source itself (the call graph from traces), held to the same
        limits as a tool call; ``default`` when it fails (the source is named, as for a call)."""
        limit = self.time_for_a_call()
        if limit <= 0:
            if asyncio.iscoroutine(read):
                read.close()
            return default
        with tool_call(seconds=self._timed(limit)) as partial:
            try:
                return await asyncio.wait_for(read, timeout=self._timed(limit))
            except TimeoutError:
                self._unreadable(SourceTimeout(self._no_answer(limit), source=source))
            except SourceError as exc:
                self._unreadable(exc)
            except Exception as exc:  # an adapter bug must not kill the investigation
                self._unreadable(SourceError(f"{type(exc).__name__}: {exc}", source=source))
            finally:
                self._account(partial)
        return default

    def _account(self, partial: list[SourceError]) -> None:
        """Instances that failed while another of their kind answered: named like the rest."""
        for failure in partial:
            self._unreadable(failure)

    def _unreadable(self, exc: SourceError) -> None:
        for failed in exc.instances or (exc,):
            if failed.source not in self.unreadable:
                log.warning("adapter.failed", source=failed.source, error=str(failed), incident_id=self.incident.id)
            self.unreadable.setdefault(failed.source, str(failed))

    def _failed(self, action: Action, kind: SourceKind, exc: SourceError) -> Observation:
        self._unreadable(exc)
        return self._record(action, kind, ErrorData(error=f"{exc.source} could not be read: {exc}"))

    def _record(self, action: Action, kind: SourceKind | None, data: ObservationData) -> Observation:
        # redacted here, once: later doors (the report) skip an observation's data and text
        chain = redactors()
        data = scrub_model(data, chain)
        text = redact(describe(data), chain)[0]
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

    async def _metrics_versions(self, args: VersionArgs, source: MetricsSource) -> ObservationData:
        rollout = await self._rollout_of(args.service)
        return await source.versions(incident=self.incident, service=args.service, rollout=rollout)

    async def _rollout_of(self, service: str) -> ChangeRecord | None:
        """The service's rollout in the window, as the change sources record it (a call of its own,
        in the observations like any other): which version is new, and the pods of each. None when
        no change source knows one; the comparison then goes by the series' version labels alone."""
        if self.sources.changes is None:
            return None
        obs = await self.call(
            Action(tool="changes.list", args={"service": service, "before_min": ROLLOUT_LOOKBACK_MIN})
        )
        if not isinstance(obs.data, ChangesData):
            return None
        rolling = [c for c in obs.data.changes if c.kind in ROLLING and c.ts <= self.incident.window.end]
        return rolling[-1] if rolling else None

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
