"""opsagent as a Model Context Protocol server (``opsagent mcp``), on the official Python SDK.

A coding assistant or chat agent calls opsagent's tools over MCP: ``investigate`` (a recorded
incident, an Alertmanager alert, or a service and symptom as ``opsagent investigate --service``
takes them), ``get_report``, ``list_investigations``, ``replay``, ``list_lessons`` and ``feedback``;
reports are also resources (``opsagent://reports/{incident_id}``). While an investigation runs, each
of its events (triage, proposals, steps, verdicts) is a progress notification.

It is read-only like the rest of opsagent: it reads the configured sources and writes only to
opsagent's own store (investigations, lessons, feedback). Recorded incidents are read only from
under the incidents directory the server was given, never from a path a caller names elsewhere.
An investigation runs apart from the request that asked for it: a client that disconnects or
cancels does not stop it, and it is stored when it ends (``get_report`` finds it). Over HTTP the
caller presents the webhook's credentials (``OPSAGENT_WEBHOOK_TOKEN`` or basic auth), as the
service's webhook takes them; stdio needs none (the client started the process).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import structlog
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from adapters.config import sources_from_settings
from opsagent.errors import UserError
from opsagent.feedback import FeedbackOutcome, apply_feedback, keep_investigation
from opsagent.fixtures import load
from opsagent.lessons import root_cause_parts
from opsagent.loop import Event
from opsagent.models import Alert, Lesson, Report
from opsagent.packaged import demo_incident
from opsagent.pipeline import investigate
from opsagent.plan import Planner, load_default_playbooks, replay_reading
from opsagent.reasoner import PlaybookReasoner
from opsagent.report import to_json, to_markdown
from opsagent.scoreboard import IncidentScore, replay
from opsagent.settings import Settings
from opsagent.store import InvestigationRecord, Store, StoreError
from opsagent.strategies import strategy as check_strategy
from opsagent.triggers import ad_hoc_alert, duration, moment
from opsagent.triggers import symptom as parse_symptom

log = structlog.get_logger("opsagent.mcp")

T = TypeVar("T")

#: Longest text argument accepted (a name, a time, a path); an alert is bounded by its own fields.
MAX_TEXT = 512
#: Most labels or annotations an alert may carry here, and the longest value of one.
MAX_LABELS = 64
DEMO = "demo"
REPORT_URI = "opsagent://reports/{incident_id}"

Text = Annotated[str, Field(max_length=MAX_TEXT)]
Strategy = Literal["hybrid", "react", "tot", "plan", "mcts", "reflexion"]
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=True)
# It writes only to opsagent's own store; nothing outside changes.
RECORDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


class AlertIn(BaseModel):
    """An Alertmanager alert as a tool argument: bounded, so a huge argument is refused whole."""

    labels: dict[Text, Text] = Field(max_length=MAX_LABELS)
    annotations: dict[Text, Annotated[str, Field(max_length=4 * MAX_TEXT)]] = Field(
        default_factory=dict, max_length=MAX_LABELS
    )
    startsAt: datetime
    endsAt: datetime | None = None
    generatorURL: Text | None = None
    fingerprint: Text | None = None


class Investigated(BaseModel):
    """What ``investigate`` answers: the conclusion in short, and where the whole report is."""

    incident_id: str
    status: str
    root_cause: str | None = Field(description="component/kind, when one was concluded")
    suspects: list[str] = Field(description="the ranked suspects, component/kind, most likely first")
    summary: str
    report_uri: str


class ReplayResult(BaseModel):
    strategy: str
    ac1: float
    ac3: float
    avg5: float
    kind_accuracy: float
    incidents: list[IncidentScore]


@dataclass
class Investigations:
    """The server's state: its settings, the incidents directory callers may name recordings under,
    and the investigations still running (kept so that none is lost with its request)."""

    config: Settings
    incidents_dir: Path | None
    running: set[asyncio.Task[Report]] = field(default_factory=set)

    def recording(self, name: str) -> Path:
        """The recorded incident a caller names: ``demo`` or a directory under the incidents directory."""
        if name == DEMO:
            return demo_incident()
        if self.incidents_dir is None:
            raise ToolError(f"no incidents directory is served; name {DEMO!r} or start with --incidents DIR")
        root = self.incidents_dir.resolve()
        found = (root / name).resolve()
        if not found.is_relative_to(root) or not (found / "incident.yaml").is_file():
            raise ToolError(f"{name!r}: no recorded incident of that name under the incidents directory")
        return found

    async def stored(self, read: Callable[[Store], T]) -> T:
        """One operation on the store, in a thread (the store's calls block), its errors as the tool's."""

        def go() -> T:
            with Store(self.config.store) as memory:
                return read(memory)

        try:
            return await asyncio.to_thread(go)
        except StoreError as exc:  # said without where the store is: a remote caller has no use for it
            raise ToolError(str(exc).removeprefix(f"{exc.where}: ")) from exc

    def start(self, work: Awaitable[Report]) -> asyncio.Task[Report]:
        """Run an investigation apart from the request: it ends and is stored whatever the client does."""

        async def run_and_keep() -> Report:
            report = await work
            try:
                kept = await self.stored(lambda memory: keep_investigation(memory, report))
            except ToolError as exc:
                log.warning("mcp.not_recorded", incident_id=report.incident.id, error=str(exc))
            else:
                log.info("mcp.recorded", incident_id=report.incident.id, lessons=kept.lessons)
            return report

        task = asyncio.get_running_loop().create_task(run_and_keep())
        self.running.add(task)
        task.add_done_callback(self.running.discard)
        return task

    async def drain(self) -> None:
        """Wait for the investigations still running (the server is stopping)."""
        if self.running:
            await asyncio.gather(*self.running, return_exceptions=True)


def describe(event: Event) -> str:
    """One line of progress for an investigation's event."""
    match event.event:
        case "triaged":
            top = ", ".join(c.component for c in event.components[:3])
            return f"triage: top suspects {top or 'none'}"
        case "recalled":
            return f"{len(event.lessons)} lesson(s) recalled"
        case "proposed":
            return f"{len(event.hypotheses)} hypotheses proposed"
        case "beam":
            return f"verifying {', '.join(event.hypothesis_ids)}"
        case "started":
            h = event.hypothesis
            return f"started {h.id}: {h.kind} on {h.component}"
        case "step":
            return f"{event.hypothesis_id}: step {event.step.index}"
        case "verdict":
            return f"{event.hypothesis_id}: {event.verdict.status}"
    return event.event


class Progress:
    """The investigation's events as MCP progress notifications. The pipeline's listener must not
    block or raise, so events are queued and sent by a pump; once the client is gone, sending stops."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=1024)
        self.sent = 0

    def __call__(self, event: Event) -> None:
        with contextlib.suppress(asyncio.QueueFull):  # a client too slow to read loses progress, not the result
            self.queue.put_nowait(describe(event))

    async def pump(self) -> None:
        while (message := await self.queue.get()) is not None:
            self.sent += 1
            try:
                await self.ctx.report_progress(self.sent, None, message)
            except Exception:  # the client went away: the investigation goes on without an audience
                return

    def close(self) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(None)


def summarised(report: Report) -> Investigated:
    rc = report.root_cause
    return Investigated(
        incident_id=report.incident.id,
        status=report.status,
        root_cause=f"{rc.component}/{rc.kind}" if rc is not None else None,
        suspects=[f"{s.component}/{s.kind}" for s in report.suspects],
        summary=report.statement,
        report_uri=REPORT_URI.format(incident_id=report.incident.id),
    )


def build_server(config: Settings, *, incidents_dir: Path | None = None) -> MCPServer[Investigations]:
    """The MCP server over ``config``'s sources and store; ``incidents_dir`` holds the recorded
    incidents callers may investigate and replay by name."""
    state = Investigations(config=config, incidents_dir=incidents_dir)

    @contextlib.asynccontextmanager
    async def lifespan(_: MCPServer[Investigations]) -> AsyncIterator[Investigations]:
        try:
            yield state
        finally:
            await state.drain()

    server: MCPServer[Investigations] = MCPServer(
        name="opsagent",
        instructions=(
            "Incident root-cause analysis, read-only. investigate an alert, a service's symptom or a "
            "recorded incident; read reports with get_report or opsagent://reports/{incident_id}."
        ),
        lifespan=lifespan,
        # the SDK's own log lines (a rejected call, a failed tool) at INFO would drown opsagent's on stderr
        log_level="WARNING",
    )

    @server.tool(name="investigate", annotations=READ_ONLY)
    async def investigate_incident(
        ctx: Context,
        incident: Annotated[
            Text | None, Field(description=f"a recorded incident: {DEMO!r} or its directory's name")
        ] = None,
        alert: Annotated[AlertIn | None, Field(description="an Alertmanager alert object")] = None,
        service: Annotated[Text | None, Field(description="ask about a service directly: no alert needed")] = None,
        symptom: Annotated[Text | None, Field(description="latency, errors, saturation or availability")] = None,
        since: Annotated[Text | None, Field(description="the symptom began this long ago (30m, 2h)")] = None,
        at: Annotated[Text | None, Field(description="the symptom began then (2026-03-17T14:02:00Z)")] = None,
        strategy: Strategy = "hybrid",
    ) -> Investigated:
        """Investigate one incident and answer its root cause, ranked suspects and where its report
        is. Give one trigger: a recorded incident, an alert, or a service with its symptom."""
        chosen = [x for x in (incident, alert, service) if x is not None]
        if len(chosen) != 1:
            raise ToolError("give one trigger: incident, alert, or service with symptom (and since or at)")
        check_strategy(strategy)
        planner = Planner.from_settings(config, strategy=strategy)
        lessons = await state.stored(lambda memory: memory.lessons())
        progress = Progress(ctx)
        work: Awaitable[Report]
        if incident is not None:
            path = state.recording(incident)

            async def replayed() -> Report:
                plan = planner.plan(replay_reading(load(path)[0]), lessons=lessons)
                return await investigate(plan, listener=progress, now=datetime.now(UTC))

            work = replayed()
        else:
            asked = alert_of(alert, service, symptom, since, at)

            async def live() -> Report:
                async with sources_from_settings(config) as configured:
                    plan = planner.plan(configured.reading(asked), lessons=lessons)
                    return await investigate(plan, listener=progress)

            work = live()
        task = state.start(work)
        pump = asyncio.get_running_loop().create_task(progress.pump())
        try:
            # shielded: the request may be cancelled (the client left); the investigation is not
            report = await asyncio.shield(task)
        except UserError as exc:  # a recorded incident that does not load, a source configured wrongly
            raise ToolError(str(exc)) from exc
        finally:
            progress.close()
            await asyncio.wait({pump}, timeout=1.0)
            pump.cancel()
        return summarised(report)

    @server.tool(annotations=READ_ONLY)
    async def get_report(incident_id: Text, format: Literal["markdown", "json"] = "markdown") -> str:
        """A recorded investigation's whole report, as Markdown or as the versioned JSON report."""
        report = await state.stored(lambda memory: memory.report(incident_id))
        return to_markdown(report) if format == "markdown" else to_json(report)

    @server.tool(annotations=READ_ONLY)
    async def list_investigations(
        limit: Annotated[int, Field(ge=1, le=500)] = 50,
    ) -> list[InvestigationRecord]:
        """Recorded investigations, most recent first: id, when, how it ended, root cause, feedback."""
        return await state.stored(lambda memory: memory.investigations(limit=limit))

    @server.tool(name="replay", annotations=READ_ONLY)
    async def replay_incidents(
        incidents: Annotated[
            Text, Field(description="a recorded incident's name, or '.' for every one under the incidents directory")
        ] = ".",
        strategy: Strategy = "hybrid",
    ) -> ReplayResult:
        """Replay recorded incidents against their truth: AC@1, AC@3, Avg@5, kind accuracy, per incident."""
        if incidents == ".":
            if state.incidents_dir is None:
                raise ToolError("no incidents directory is served; start with --incidents DIR")
            root = state.incidents_dir
        else:
            root = state.recording(incidents)
        try:
            board = await replay(root, planner=Planner.from_settings(config, strategy=strategy))
        except UserError as exc:
            raise ToolError(str(exc)) from exc
        return ReplayResult(
            strategy=board.strategy,
            ac1=board.ac(1),
            ac3=board.ac(3),
            avg5=board.avg5,
            kind_accuracy=board.kind_accuracy,
            incidents=board.scores,
        )

    @server.tool(annotations=READ_ONLY)
    async def list_lessons() -> list[Lesson]:
        """Every stored lesson, most recent first: what misled, what refuted it, the call to make first."""
        return await state.stored(lambda memory: memory.lessons())

    @server.tool(annotations=RECORDS)
    async def feedback(
        incident_id: Text,
        correct: bool,
        root_cause: Annotated[
            Text | None, Field(description='what it really was when wrong, e.g. "stripe-api/downstream_latency"')
        ] = None,
    ) -> FeedbackOutcome:
        """The engineer's verdict on an investigation: it counts for the lessons it used, and a wrong
        conclusion with a named root cause becomes a lesson."""
        if correct and root_cause is not None:
            raise ToolError("root_cause goes with correct=false")
        first_checks = PlaybookReasoner(load_default_playbooks(config.playbooks_dir)).first_checks()
        if root_cause is not None:  # checked before anything is written: a typo must not replace a verdict
            try:
                root_cause_parts(root_cause, kinds=first_checks)
            except ValueError as exc:
                raise ToolError(str(exc)) from None
        try:
            return await state.stored(
                lambda memory: apply_feedback(
                    memory,
                    incident_id,
                    correct=correct,
                    root_cause=root_cause,
                    first_checks=first_checks,
                    now=datetime.now(UTC),
                )
            )
        except ValueError as exc:  # a component the investigation did not know of: nothing was written
            raise ToolError(str(exc)) from None

    @server.resource(REPORT_URI, name="report", mime_type="text/markdown")
    async def report_resource(incident_id: str) -> str:
        """A recorded investigation's report, as Markdown."""
        try:
            report = await state.stored(lambda memory: memory.report(incident_id))
        except ToolError as exc:
            raise ResourceNotFoundError(str(exc)) from exc
        return to_markdown(report)

    return server


def alert_of(
    alert: AlertIn | None, service: str | None, symptom_name: str | None, since: str | None, at: str | None
) -> Alert:
    """The alert an ``investigate`` call stands for; a clear tool error for a question that cannot be one."""
    try:
        if alert is not None:
            if service or symptom_name or since or at:
                raise ToolError("symptom, since and at go with service, not with an alert")
            return Alert.model_validate(alert.model_dump(exclude_none=True))
        if service is None:
            raise ToolError("symptom, since and at go with service")
        if symptom_name is None:
            raise ToolError("say what is wrong: symptom is latency, errors, saturation or availability")
        now = datetime.now(UTC)
        return ad_hoc_alert(
            service,
            parse_symptom(symptom_name),
            now=now,
            since=duration(since) if since else None,
            at=moment(at, now=now) if at else None,
        )
    except (UserError, ValidationError) as exc:
        raise ToolError(str(exc)) from exc


Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]


def authenticated(app: App, allows: Callable[[str | None], bool], challenge: str) -> App:
    """The HTTP app behind the service's authentication: a request without the credentials gets 401."""

    async def guarded(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            if not allows(headers.get("authorization")):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"www-authenticate", challenge.encode()), (b"content-type", b"text/plain")],
                    }
                )
                await send({"type": "http.response.body", "body": b"authentication required\n"})
                return
        await app(scope, receive, send)

    return guarded
