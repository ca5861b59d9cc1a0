"""Notification sinks: what a finished investigation says, sent where the on-call engineer looks.

* :class:`SlackNotifier`: a Slack incoming webhook, as Block Kit (verdict, root cause, top evidence,
  next step, a button to the report page) with a plain ``text`` fallback (notifications, and
  Mattermost / Rocket.Chat, which read only that).
* :class:`WebhookNotifier`: a generic JSON webhook for PagerDuty / Opsgenie-style routers and
  anything else: one documented document (:class:`WebhookBody`) with a dedup key.

Both retry network errors, 408/425/429 and 5xx through :mod:`opsagent.retrying` (tenacity),
honouring ``Retry-After``; a refusal (another 4xx) is not retried. URLs usually hold a token, so
they are never logged or printed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, Protocol

import httpx
import structlog
from pydantic import BaseModel, Field

from opsagent.models import Report
from opsagent.retrying import RETRYABLE_STATUS, GaveUp, Retryable, RetryPolicy, retry_after, with_retries
from opsagent.service.metrics import ServiceMetrics
from opsagent.settings import Settings
from opsagent.store import IncidentRecord

log = structlog.get_logger("opsagent.service.notifier")

#: Slack's limits: header text, section text, blocks per message.
_HEADER, _SECTION = 150, 3000
#: Evidence items a message shows.
TOP_EVIDENCE = 3


class Notifier(Protocol):
    async def notify(self, incident: IncidentRecord, report: Report | None = None) -> bool: ...


def report_link(incident: IncidentRecord, public_url: str | None) -> str:
    path = f"/incidents/{incident.id}.html"
    return public_url.rstrip("/") + path if public_url else path


def verdict_line(incident: IncidentRecord) -> str:
    if incident.outcome in ("confirmed", "probable") and incident.root_component:
        return f"{incident.outcome}: {incident.root_kind} on {incident.root_component}"
    if incident.outcome == "failed":
        return f"investigation failed: {incident.error or 'unknown error'}"
    return "inconclusive — needs a human"


def message(incident: IncidentRecord, link: str, report: Report | None = None) -> dict[str, Any]:
    """The Slack message: Block Kit, and the same facts as plain text for what cannot show blocks."""
    state = " (resolved)" if incident.state == "resolved" else ""
    text = f"*{_mrkdwn(incident.title)}*{state}\n{_mrkdwn(verdict_line(incident))}\n<{link}|report {incident.id}>"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(incident.title + state, _HEADER)}},
        _section(f"*{_mrkdwn(verdict_line(incident).upper().split(':', 1)[0])}*" + _verdict_rest(incident, report)),
    ]
    if report is not None and report.root_cause is not None:
        blocks.append(_section(f"*Root cause*\n{_mrkdwn(report.statement.split(' Evidence: ', 1)[0])}"))
    if report is not None and report.evidence:
        lines = [f"• `{e.source.value}` {_mrkdwn(e.statement)}" for e in report.evidence[:TOP_EVIDENCE]]
        blocks.append(_section("*Top evidence*\n" + "\n".join(lines)))
    elif report is not None and report.suspects:
        lines = [f"• {_mrkdwn(s.component)} ({_mrkdwn(s.kind)}, {s.status})" for s in report.suspects[:TOP_EVIDENCE]]
        blocks.append(_section("*Where to look first*\n" + "\n".join(lines)))
    if report is not None and report.next_steps:
        blocks.append(_section(f"*Next step*\n{_mrkdwn(report.next_steps[0])}"))
    if link.startswith(("http://", "https://")):
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {"type": "button", "text": {"type": "plain_text", "text": "Open the report"}, "url": link}
                ],
            }
        )
    context = f"opsagent · {incident.id} · {incident.service}"
    if report is not None:
        context += f" · {report.cost.steps} steps, {report.cost.tool_calls} tool calls"
    if not link.startswith(("http://", "https://")):
        context += f" · report {link} (set public_url for a link)"
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _mrkdwn(context)}]})
    return {"text": text, "blocks": blocks}


def _verdict_rest(incident: IncidentRecord, report: Report | None) -> str:
    rest = verdict_line(incident).split(":", 1)
    tail = f": {_mrkdwn(rest[1].strip())}" if len(rest) == 2 else ""
    if report is not None and report.root_cause is not None:
        tail += f" (confidence {report.confidence:.2f})"
    return tail


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _cut(text, _SECTION)}}


def _mrkdwn(text: str) -> str:
    """Slack's three control characters escaped: the rest of the text shows as written."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class WebhookEvidence(BaseModel):
    source: str
    statement: str
    observation_id: str


class WebhookSuspect(BaseModel):
    component: str
    kind: str
    status: str
    score: float


class WebhookBody(BaseModel):
    """What the generic webhook POSTs: enough for a router to open, update or resolve an alert
    (``dedup_key`` stays the same for one incident) and for a person to act on it."""

    version: Literal["1"] = "1"
    source: Literal["opsagent"] = "opsagent"
    event: Literal["investigation.finished"] = "investigation.finished"
    dedup_key: str = Field(description="the incident id: one per incident, for routers' deduplication")
    incident_id: str
    title: str
    service: str
    alertname: str
    state: str = Field(description="firing or resolved (Alertmanager's view of the incident)")
    outcome: str | None = Field(description="confirmed, probable, inconclusive or failed")
    severity: Literal["critical", "warning", "info"]
    summary: str = Field(description="one line: the verdict")
    root_component: str | None = None
    root_kind: str | None = None
    confidence: float | None = None
    statement: str | None = None
    evidence: list[WebhookEvidence] = Field(default_factory=list)
    suspects: list[WebhookSuspect] = Field(default_factory=list)
    next_steps: list[str] = Field(default_factory=list)
    report_url: str


def webhook_body(incident: IncidentRecord, link: str, report: Report | None = None) -> WebhookBody:
    severity: Literal["critical", "warning", "info"] = (
        "info" if incident.state == "resolved" else "critical" if incident.outcome == "confirmed" else "warning"
    )
    return WebhookBody(
        dedup_key=incident.id,
        incident_id=incident.id,
        title=incident.title,
        service=incident.service,
        alertname=incident.alertname,
        state=incident.state,
        outcome=incident.outcome,
        severity=severity,
        summary=f"{incident.title}: {verdict_line(incident)}",
        root_component=incident.root_component,
        root_kind=incident.root_kind,
        confidence=report.confidence if report is not None else None,
        statement=report.statement if report is not None else None,
        evidence=[
            WebhookEvidence(source=e.source.value, statement=e.statement, observation_id=e.observation_id)
            for e in (report.evidence[:TOP_EVIDENCE] if report is not None else [])
        ],
        suspects=[
            WebhookSuspect(component=s.component, kind=s.kind, status=s.status, score=s.score)
            for s in (report.suspects[:TOP_EVIDENCE] if report is not None else [])
        ],
        next_steps=list(report.next_steps) if report is not None else [],
        report_url=link,
    )


class _Poster:
    """One sink: a POST of JSON with retries; the URL stays secret."""

    kind = "sink"

    def __init__(
        self,
        url: str,
        *,
        public_url: str | None = None,
        metrics: ServiceMetrics | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        attempts: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        timeout_s: float = 5.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._url = url
        self.public_url = public_url
        self.metrics = metrics
        self.policy = RetryPolicy(retries=max(attempts - 1, 0), backoff_s=backoff_s, max_backoff_s=max_backoff_s)
        self.sleep = sleep
        self._client = httpx.AsyncClient(transport=transport, timeout=timeout_s)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url=<secret>)"

    async def aclose(self) -> None:
        await self._client.aclose()

    def body(self, incident: IncidentRecord, report: Report | None) -> dict[str, Any]:
        raise NotImplementedError

    async def notify(self, incident: IncidentRecord, report: Report | None = None) -> bool:
        body = self.body(incident, report)

        async def attempt(number: int) -> int:
            try:
                response = await self._client.post(self._url, json=body)
            except httpx.HTTPError as exc:
                raise Retryable(type(exc).__name__) from None
            if response.is_success:
                return number
            problem = f"HTTP {response.status_code}"
            if response.status_code in RETRYABLE_STATUS:
                raise Retryable(problem, wait_s=retry_after(response.headers))
            raise _Refused(problem)  # the sink refuses this message: retrying will not change its mind

        def retrying(number: int, wait: float, problem: str) -> None:
            log.info("notify.retry", sink=self.kind, incident_id=incident.id, attempt=number, problem=problem)

        try:
            number = await with_retries(attempt, policy=self.policy, sleep=self.sleep, on_retry=retrying)
        except (GaveUp, _Refused) as exc:
            log.warning("notify.failed", sink=self.kind, incident_id=incident.id, problem=str(exc))
            self._count("failed")
            return False
        log.info("notify.sent", sink=self.kind, incident_id=incident.id, attempt=number)
        self._count("sent")
        return True

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.notify.labels(result=result).inc()


class _Refused(Exception):
    pass


class SlackNotifier(_Poster):
    kind = "slack"

    def body(self, incident: IncidentRecord, report: Report | None) -> dict[str, Any]:
        return message(incident, report_link(incident, self.public_url), report)


class WebhookNotifier(_Poster):
    kind = "webhook"

    def body(self, incident: IncidentRecord, report: Report | None) -> dict[str, Any]:
        return webhook_body(incident, report_link(incident, self.public_url), report).model_dump(mode="json")


class Notifiers:
    """Several sinks as one: each gets the message; sent when at least one took it."""

    def __init__(self, sinks: Sequence[_Poster]) -> None:
        self.sinks = list(sinks)

    async def notify(self, incident: IncidentRecord, report: Report | None = None) -> bool:
        results = await asyncio.gather(*(s.notify(incident, report) for s in self.sinks))
        return any(results)

    async def aclose(self) -> None:
        for sink in self.sinks:
            await sink.aclose()


def sinks_from(settings: Settings, metrics: ServiceMetrics | None = None) -> Notifiers | None:
    """The sinks the settings configure (``notify_url``: Slack, ``notify_webhook_url``: generic JSON)."""
    sinks: list[_Poster] = []
    if settings.notify_url is not None:
        sinks.append(
            SlackNotifier(settings.notify_url.get_secret_value(), public_url=settings.public_url, metrics=metrics)
        )
    if settings.notify_webhook_url is not None:
        sinks.append(
            WebhookNotifier(
                settings.notify_webhook_url.get_secret_value(), public_url=settings.public_url, metrics=metrics
            )
        )
    return Notifiers(sinks) if sinks else None
