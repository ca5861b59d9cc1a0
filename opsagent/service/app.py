"""The webhook service: Alertmanager in, incidents and their reports out.

    POST /webhook/alertmanager    a notification; 202 once it is on disk (401, 408, 413, 415, 422, 503)
    POST /webhook/grafana         a Grafana-managed alerting notification, handled as Alertmanager's
    GET  /incidents               incidents, most recent first (?status=firing|resolved, ?service=…)
    GET  /incidents/{id}          the incident and its report, JSON
    GET  /incidents/{id}.html     the report page, with charts of the cited series
    GET  /                        recent incidents
    GET  /healthz, /readyz        alive; ready (the store can be written, the dispatcher runs)
    GET  /metrics                 the service's own Prometheus metrics

A worker process (``opsagent worker``) serves only the last three.

:func:`create_app` wires the parts; each lives in its own module of this package.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

import structlog
from fastapi import APIRouter, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field, ValidationError
from starlette.requests import ClientDisconnect

from opsagent.correlation import Correlator
from opsagent.models import Report
from opsagent.retrying import RetryPolicy
from opsagent.service.auth import Credentials
from opsagent.service.charts import Chart
from opsagent.service.metrics import ServiceMetrics
from opsagent.service.notifier import Sink, sinks_from
from opsagent.service.outbox import NotificationSender
from opsagent.service.pages import incident_page, index_page, not_found_page
from opsagent.service.payload import GrafanaPayload, WebhookPayload
from opsagent.service.provider import SourceProvider, known_topology, provider_for
from opsagent.service.queue import Dispatcher, Inbox
from opsagent.service.storms import Part, StormRouter
from opsagent.service.worker import Runner, worker_config
from opsagent.settings import Settings, load_settings
from opsagent.store import IncidentRecord, InvestigationState, NotificationIn, ServiceStore, StoreError

log = structlog.get_logger("opsagent.service")
PayloadT = TypeVar("PayloadT", bound=BaseModel)

WEBHOOK_PREFIX = "/webhook/"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
#: What a process of the service does (see :func:`create_app`).
Role = Literal["all", "web", "worker"]


# ---------------------------------------------------------------- API shapes


class AcceptedNotification(BaseModel):
    """What the webhook did with a notification."""

    notification_id: int
    incident_id: str | None
    action: Literal["opened", "updated", "resolved", "ignored"] = Field(
        description="opened an incident (and queued its investigation), updated or resolved the open incident "
        "of the alert group, or ignored a resolution of no open incident"
    )
    report_url: str | None = None
    incident_ids: list[str] = Field(
        default_factory=list,
        description="with alert correlation: every incident the notification's alerts went to, the one above "
        "first (several when alerts of one group are not connected)",
    )


class Problem(BaseModel):
    field: str
    message: str
    type: str


class ProblemResponse(BaseModel):
    detail: str
    errors: list[Problem] = Field(default_factory=list)


class IncidentList(BaseModel):
    count: int
    incidents: list[IncidentRecord]


class IncidentDetail(BaseModel):
    incident: IncidentRecord
    report: Report | None = Field(description="null until the investigation has finished")


# ---------------------------------------------------------------- the guard


#: Answered to anyone: liveness and readiness probes carry no credentials.
OPEN_PATHS = frozenset({"/healthz", "/readyz"})


def _json_media(content_type: str | None) -> bool:
    """Whether a Content-Type says JSON (``application/json``, ``…+json``, any parameters); an
    absent one is taken as JSON, as a client that sends a body without saying what it is means it."""
    if content_type is None:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class Guard:
    """Checks credentials before anything else runs. The webhook takes the webhook's credentials,
    then its body's size and type are checked before anything reads it: a caller without the token
    costs no parsing, a body over the limit is refused as it streams in, one that is not JSON is a
    415, and one that does not arrive within ``body_timeout_s`` a 408. Every other path but the
    health probes takes the readers' credentials or the webhook's."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        credentials: Credentials,
        readers: Credentials,
        max_body: int,
        metrics: ServiceMetrics,
        body_timeout_s: float = 30.0,
    ) -> None:
        self.app = app
        self.credentials = credentials
        self.readers = readers
        self.max_body = max_body
        self.metrics = metrics
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        authorization = headers.get("authorization")
        if not scope["path"].startswith(WEBHOOK_PREFIX):
            if self.readers.allows(authorization) or self.credentials.allows(authorization):
                await self.app(scope, receive, send)
                return
            self.metrics.rejected.labels(reason="unauthorized_read").inc()
            challenge = self.readers.challenge if self.readers.configured else self.credentials.challenge
            await _reply(send, 401, "missing or wrong credentials", {"www-authenticate": challenge})
            return
        if not self.credentials.allows(authorization):
            self.metrics.rejected.labels(reason="unauthorized").inc()
            await _reply(send, 401, "missing or wrong credentials", {"www-authenticate": self.credentials.challenge})
            return
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body:
            self.metrics.rejected.labels(reason="too_large").inc()
            await _reply(send, 413, f"body over the limit of {self.max_body} bytes")
            return
        if not _json_media(headers.get("content-type")):
            self.metrics.rejected.labels(reason="media_type").inc()
            await _reply(send, 415, "the body must be JSON (Content-Type: application/json), as Alertmanager sends")
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            try:
                async with asyncio.timeout(self.body_timeout_s):  # no task per read, unlike wait_for
                    message = await receive()
            except TimeoutError:
                self.metrics.rejected.labels(reason="body_timeout").inc()
                log.info("webhook.body_timeout", timeout_s=self.body_timeout_s, received_bytes=seen)
                raise HTTPException(408, f"the body did not arrive within {self.body_timeout_s:g} s") from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    self.metrics.rejected.labels(reason="too_large").inc()
                    raise HTTPException(413, f"body over the limit of {self.max_body} bytes")
            return message

        await self.app(scope, counted, send)


async def _reply(send: Send, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
    body = ProblemResponse(detail=detail).model_dump_json().encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


# ---------------------------------------------------------------- the app


@dataclass
class Parts:
    settings: Settings
    metrics: ServiceMetrics
    store: ServiceStore
    inbox: Inbox
    dispatcher: Dispatcher | None
    sender: NotificationSender | None


def _problems(exc: RequestValidationError) -> list[Problem]:
    out = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ())]
        if loc and loc[0] == "body":
            loc = loc[1:]
        out.append(Problem(field=".".join(loc) or "body", message=str(err.get("msg", "")), type=str(err.get("type"))))
    return out


def create_app(
    settings: Settings | None = None,
    *,
    provider: SourceProvider | None = None,
    runner: Literal["process", "thread"] = "process",
    sinks: Sequence[Sink] | None = None,
    metrics: ServiceMetrics | None = None,
    poll_s: float = 2.0,
    log_level: str = "info",
    role: Role = "all",
) -> FastAPI:
    """The service, ready for uvicorn. Raises :class:`~opsagent.errors.ConfigError` when the
    webhook has no credentials (and is not explicitly open) or the configuration is inconsistent.

    ``role``: ``all`` accepts, serves pages and runs investigations (``opsagent serve``); ``web``
    accepts and serves pages, leaving the jobs to workers elsewhere (``serve --no-workers``);
    ``worker`` runs investigations only, answering health probes and /metrics
    (``opsagent worker``)."""
    settings = settings or load_settings()
    if role == "worker":  # no webhook here: its credentials, if any, only open /metrics
        credentials = Credentials(
            token=settings.webhook_token, username=settings.webhook_username, password=settings.webhook_password
        )
    else:
        credentials = Credentials.from_settings(settings)
    readers = Credentials.readers_from_settings(settings)
    metrics = metrics or ServiceMetrics()
    if provider is None:
        provider = provider_for(settings)
    config = worker_config(settings, provider=provider, log_level=log_level)
    parts: Parts | None = None
    correlating = settings.correlation.enabled and role != "worker"
    storms = StormRouter(Correlator.of(settings.correlation, known_topology(provider)) if correlating else None)

    def current() -> Parts:
        if parts is None:
            raise HTTPException(503, "the service is starting")
        return parts

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        nonlocal parts
        # every role writes what an incident's changes owe the sinks; web replicas leave the sending
        # to the processes that run workers
        configured = list(sinks) if sinks is not None else sinks_from(settings)
        store = await ServiceStore.open(settings.store, sinks=[s.name for s in configured])  # or fails loudly
        dispatcher, sender = None, None
        if role != "web":
            if configured:
                sender = NotificationSender(
                    store=store,
                    sinks=configured,
                    metrics=metrics,
                    policy=RetryPolicy(
                        retries=settings.notify_attempts - 1,
                        backoff_s=settings.notify_backoff_s,
                        max_backoff_s=settings.notify_max_backoff_s,
                    ),
                    poll_s=poll_s,
                )
                await sender.start()
            dispatcher = Dispatcher(
                store=store,
                runner=Runner(config, workers=settings.workers, kind=runner),
                metrics=metrics,
                lease_s=settings.job_lease_s,
                timeout_s=settings.job_timeout_s,
                attempts=settings.job_attempts,
                poll_s=poll_s,
                on_finished=sender.wake if sender is not None else None,
                retention_s=settings.retention_days * 86400 or None,
            )
            await dispatcher.start()
        parts = Parts(settings, metrics, store, Inbox(store), dispatcher, sender)
        log.info(
            "service.start",
            role=role,
            workers=settings.workers if dispatcher is not None else 0,
            provider=provider.name,
            auth=repr(credentials),
            readers=repr(readers),
            notify=[s.name for s in configured],
            store=store.where,
        )
        try:
            yield
        finally:
            if dispatcher is not None:
                await dispatcher.stop()
            if sender is not None:
                await sender.stop()
            if sinks is None:  # the ones built here; a caller's are the caller's to close
                for sink in configured:
                    await sink.aclose()
            await store.close()
            parts = None
            log.info("service.stop")

    app = FastAPI(
        title="opsagent",
        summary="Alertmanager webhook receiver: every alert group investigated once, its report served.",
        version="1",
        lifespan=lifespan,
    )
    app.state.storms = storms  # what its correlator holds, for tests and operators' debugging
    app.add_middleware(
        Guard,
        credentials=credentials,
        readers=readers,
        max_body=settings.max_body_bytes,
        metrics=metrics,
        body_timeout_s=settings.body_timeout_s,
    )

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = _problems(exc)
        if request.url.path.startswith(WEBHOOK_PREFIX):
            metrics.rejected.labels(reason="invalid").inc()
        detail = "; ".join(f"{p.field}: {p.message}" for p in problems)
        body = ProblemResponse(detail=detail, errors=problems)
        return JSONResponse(body.model_dump(), status_code=422)

    @app.exception_handler(StoreError)
    async def store_down(request: Request, exc: StoreError) -> JSONResponse:
        log.error("service.store_error", path=request.url.path, error=str(exc))
        return JSONResponse(ProblemResponse(detail="the store is unavailable; retry").model_dump(), status_code=503)

    refusals: dict[int | str, dict[str, Any]] = {
        401: {"model": ProblemResponse, "description": "missing or wrong credentials"},
        408: {"model": ProblemResponse, "description": "the body did not arrive in time"},
        413: {"model": ProblemResponse, "description": "body over the size limit"},
        415: {"model": ProblemResponse, "description": "the body is not JSON"},
        422: {"model": ProblemResponse, "description": "not a version 4 Alertmanager payload; names the field"},
        503: {"model": ProblemResponse, "description": "could not be stored; Alertmanager retries"},
    }

    web = APIRouter()  # what a worker does not serve

    async def received(request: Request) -> bytes | None:
        """The body, or None when the sender gave up mid-body (it retries): nothing to answer."""
        try:
            return await request.body()
        except ClientDisconnect:
            metrics.rejected.labels(reason="disconnected").inc()
            log.info("webhook.client_disconnected", client=request.client.host if request.client else None)
            return None

    def parsed(model: type[PayloadT], body: bytes) -> PayloadT:
        """Parsed and validated in one pass; a refusal names each field that is wrong (422)."""
        try:
            return model.model_validate_json(body)
        except ValidationError as exc:
            raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None

    def note_of(payload: WebhookPayload, part: Part, body: str) -> NotificationIn:
        part_payload = part.payload(payload)
        summary = part_payload.summary()
        # a truncated list may leave out the alerts that tie this notification to the open episode;
        # a part joined to another group's incident is never a new episode of it
        timed = not (payload.truncated_alerts or part.joined)
        starts = sorted(a.starts_at for a in part_payload.firing) if timed else []
        return NotificationIn(
            group_key=part.key,
            status=part.status,
            receiver=payload.receiver,
            service=summary.service,
            alertname=summary.alertname,
            title=summary.title[:300],
            payload=body if part_payload is payload else part_payload.model_dump_json(by_alias=True),
            received_at=datetime.now(UTC),
            first_started=starts[0] if starts else None,
            last_started=starts[-1] if starts else None,
        )

    async def accept(payload: WebhookPayload, body: str, started: float) -> Response:
        """Store a notification durably, then answer: investigated once per alert group (a
        re-notification updates the incident, ``resolved`` resolves it), or once per alert storm
        when correlation is on (:mod:`opsagent.service.storms`)."""
        p = current()
        notes = [note_of(payload, part, body) for part in storms.split(payload)]
        # together: the inbox writes them in one transaction, in this order
        results = await asyncio.gather(*(p.inbox.accept(note) for note in notes))
        if any(a.job_id is not None for a in results) and p.dispatcher is not None:
            p.dispatcher.wake()
        for alert in payload.alerts:
            metrics.alerts_received.labels(status=alert.status).inc()
        for accepted in results:
            metrics.notifications.labels(action=accepted.action).inc()
            if accepted.action != "updated":
                log.info("webhook.accepted", action=accepted.action, incident_id=accepted.incident_id)
        metrics.accept_seconds.observe(time.perf_counter() - started)
        accepted = results[0]
        answer = AcceptedNotification(
            notification_id=accepted.notification_id,
            incident_id=accepted.incident_id,
            action=accepted.action,
            report_url=f"/incidents/{accepted.incident_id}.html" if accepted.incident_id else None,
            incident_ids=list(dict.fromkeys(a.incident_id for a in results if a.incident_id))
            if storms.correlator is not None
            else [],
        )
        return Response(answer.model_dump_json(), status_code=202, media_type="application/json")

    def posted(schema: str) -> dict[str, Any]:
        return {
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
            },
            "security": [{"bearer": []}, {"basic": []}],
        }

    @web.post(
        "/webhook/alertmanager",
        status_code=202,
        response_model=AcceptedNotification,
        responses=refusals,
        openapi_extra=posted("WebhookPayload"),
        tags=["webhook"],
    )
    async def webhook(request: Request) -> Response:
        """Accept an Alertmanager notification (version 4): stored durably before the answer,
        investigated once per alert group (a re-notification updates the incident, ``resolved``
        resolves it)."""
        started = time.perf_counter()
        body = await received(request)
        if body is None:
            return Response(status_code=400)
        payload = parsed(WebhookPayload, body)
        return await accept(payload, body.decode("utf-8", errors="replace"), started)

    @web.post(
        "/webhook/grafana",
        status_code=202,
        response_model=AcceptedNotification,
        responses=refusals,
        openapi_extra=posted("GrafanaPayload"),
        tags=["webhook"],
    )
    async def grafana_webhook(request: Request) -> Response:
        """Accept a Grafana-managed alerting notification (a webhook contact point, payload
        version 1): stored as the Alertmanager notification it amounts to, and from there handled
        exactly as one (its group key is Grafana's, prefixed by the organisation)."""
        started = time.perf_counter()
        body = await received(request)
        if body is None:
            return Response(status_code=400)
        payload = parsed(GrafanaPayload, body).as_alertmanager()
        return await accept(payload, payload.model_dump_json(by_alias=True), started)

    @web.get("/incidents", response_model=IncidentList, tags=["incidents"])
    async def incidents(
        status: Annotated[Literal["firing", "resolved"] | None, Query(description="the alert group's state")] = None,
        investigation: InvestigationState | None = None,
        service: Annotated[str | None, Query(max_length=256)] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    ) -> IncidentList:
        """Incidents, most recent first."""
        found = await current().store.incidents(
            state=status, investigation=investigation, service=service, limit=limit, offset=offset
        )
        return IncidentList(count=len(found), incidents=found)

    @web.get("/incidents/{incident_id}.html", response_class=HTMLResponse, tags=["pages"])
    async def incident_html(incident_id: str) -> HTMLResponse:
        """The report page: root cause, evidence with charts, timeline, what was ruled out, lessons, cost."""
        incident, report, charts = await _load(current().store, incident_id)
        if incident is None:
            return HTMLResponse(not_found_page(incident_id), status_code=404)
        return HTMLResponse(incident_page(incident, report, charts))

    @web.get(
        "/incidents/{incident_id}",
        response_model=IncidentDetail,
        responses={404: {"model": ProblemResponse}},
        tags=["incidents"],
    )
    async def incident_json(
        incident_id: str,
        observations: Annotated[bool, Query(description="include every observation (large)")] = False,
    ) -> Response:
        """The incident and its report (JSON); ``report`` is null until the investigation ends."""
        incident, report, _ = await _load(current().store, incident_id, charts=False)
        if incident is None:
            return JSONResponse(ProblemResponse(detail=f"no incident {incident_id}").model_dump(), status_code=404)
        body = report.model_dump_json(exclude=None if observations else {"observations"}) if report else "null"
        return Response(f'{{"incident":{incident.model_dump_json()},"report":{body}}}', media_type="application/json")

    @web.get("/", response_class=HTMLResponse, tags=["pages"])
    async def index(
        status: Literal["firing", "resolved"] | None = None,
        service: Annotated[str | None, Query(max_length=256)] = None,
    ) -> HTMLResponse:
        """Recent incidents."""
        found = await current().store.incidents(state=status, service=service, limit=100)
        return HTMLResponse(index_page(found, state=status, service=service))

    @app.get("/healthz", tags=["health"], openapi_extra={"security": []})
    async def healthz() -> dict[str, str]:
        """The process answers."""
        return {"status": "ok"}

    unready: list[str] = []  # the reason last reported, so a failing probe is logged once, not every time

    @app.get("/readyz", tags=["health"], responses={503: {"model": ProblemResponse}}, openapi_extra={"security": []})
    async def readyz() -> JSONResponse:
        """Ready to accept: a notification could be written now (the accept path is tried and
        rolled back) and, where this process runs investigations, the dispatcher runs."""
        p = parts
        if p is None or (p.dispatcher is not None and not p.dispatcher.alive):
            return JSONResponse(ProblemResponse(detail="not ready").model_dump(), status_code=503)
        try:
            await p.store.check_writable()
            counts = await p.store.job_counts(("queued", "running"))
        except StoreError as exc:
            # The why (a file path, a PostgreSQL role, host and database) goes to the operator's log;
            # this endpoint answers anyone, so it says only what is wrong.
            reason = f"the store cannot be written: {exc}"
            if unready != [reason]:
                log.error("service.not_ready", error=reason)
                unready[:] = [reason]
            return JSONResponse(ProblemResponse(detail="store not writable").model_dump(), status_code=503)
        if unready:
            log.info("service.ready")
            unready.clear()
        return JSONResponse({"status": "ready", "queued": counts["queued"], "running": counts["running"]})

    @app.get("/metrics", tags=["health"], response_class=Response)
    async def prometheus_metrics() -> Response:
        """The service's own metrics, Prometheus text format."""
        p = parts
        if p is not None:
            counts = await p.store.job_counts(("queued", "running"))
            for state in ("queued", "running"):
                metrics.queue_depth.labels(state=state).set(counts[state])
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
            components = schema.setdefault("components", {})
            payload_schema = WebhookPayload.model_json_schema(ref_template="#/components/schemas/{model}")
            components.setdefault("schemas", {}).update(payload_schema.pop("$defs", {}))
            components["schemas"]["WebhookPayload"] = payload_schema
            grafana_schema = GrafanaPayload.model_json_schema(ref_template="#/components/schemas/{model}")
            components["schemas"].update(grafana_schema.pop("$defs", {}))
            components["schemas"]["GrafanaPayload"] = grafana_schema
            components["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer"},
                "basic": {"type": "http", "scheme": "basic"},
            }
            schema["security"] = [{"bearer": []}, {"basic": []}]  # every read: the readers' or the webhook's
            app.openapi_schema = schema
        return app.openapi_schema

    if role != "worker":
        app.include_router(web)
    app.openapi = openapi  # type: ignore[method-assign]
    return app


async def _load(
    store: ServiceStore, incident_id: str, *, charts: bool = True
) -> tuple[IncidentRecord | None, Report | None, list[Chart]]:
    incident, report, stored = await store.incident_with_report(incident_id)
    shown: list[Chart] = []
    if incident is not None and charts:
        try:
            shown = [Chart.model_validate(c) for c in _json_list(stored)]
        except ValidationError as exc:  # a chart is decoration: the report is still served
            log.warning("service.charts_unreadable", incident_id=incident_id, error=str(exc))
    return incident, report, shown


def _json_list(text: str) -> list[Any]:
    value = json.loads(text)
    return value if isinstance(value, list) else []
