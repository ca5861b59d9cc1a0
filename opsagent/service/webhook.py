"""The webhook routes: an Alertmanager (or Grafana) notification is parsed, split into the alert
groups or storms it belongs to, stored durably, and only then answered."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

import structlog
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from opsagent.correlation import Correlator
from opsagent.service.api import REFUSALS, AcceptedNotification, posted
from opsagent.service.metrics import ServiceMetrics
from opsagent.service.payload import GrafanaPayload, WebhookPayload
from opsagent.service.running import Running
from opsagent.service.storms import Part, split
from opsagent.store import NotificationIn
from opsagent.store.storms import Delivery

log = structlog.get_logger("opsagent.service")
PayloadT = TypeVar("PayloadT", bound=BaseModel)


def webhook_routes(
    running: Running, *, correlator: Callable[[], Correlator] | None, metrics: ServiceMetrics
) -> APIRouter:
    """``POST /webhook/alertmanager`` and ``POST /webhook/grafana``."""
    web = APIRouter()
    current = running.current

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

        def notes(held: Correlator | None) -> list[NotificationIn]:
            return [note_of(payload, part, body) for part in split(payload, held)]

        # one transaction: the storms its alerts may join are read, and its parts written, together
        alerts = tuple(a.as_alert() for a in payload.alerts) if correlator is not None else ()
        results = await p.inbox.deliver(Delivery(split=notes, alerts=alerts, keys=(payload.group_key,)))
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
            if correlator is not None
            else [],
        )
        return Response(answer.model_dump_json(), status_code=202, media_type="application/json")

    @web.post(
        "/webhook/alertmanager",
        status_code=202,
        response_model=AcceptedNotification,
        responses=REFUSALS,
        openapi_extra=posted("WebhookPayload"),
        tags=["webhook"],
    )
    async def webhook(request: Request) -> Response:
        """Accept an Alertmanager notification (version 4): stored durably before the answer,
        investigated once per alert group (a re-notification updates the incident, ``resolved``
        resolves it), or once per alert storm: with correlation (on by default), alerts connected
        to a storm another group opened go to that storm's incident."""
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
        responses=REFUSALS,
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

    return web
