"""Notification sinks: what an incident's investigation found (and its resolution), posted where
the on-call engineer looks.

* :class:`SlackNotifier`: Slack, as Block Kit (verdict, root cause, top evidence, next step, a
  button to the report page) with a plain ``text`` fallback (notifications, and Mattermost /
  Rocket.Chat, which read only that). Through the Web API's ``chat.postMessage`` with a bot token
  and a channel, which answers with the post's ``ts``: later messages about the incident reply in
  the first one's thread (a resolution is also shown in the channel). Through an incoming webhook,
  which answers a bare ``ok``: every message is a new one in the channel, so each names the incident
  and what changed (the notification's stable key, ``inc-…:resolved``), and an update says which
  incident it updates and what its investigation found.
* :class:`WebhookNotifier`: a generic JSON webhook for PagerDuty / Opsgenie-style routers and
  anything else: one documented document (:class:`WebhookBody`) with a dedup key.

A sink posts once and says how it went (:class:`Delivery`): sent, worth another try (a network
error or timeout, 408/425/429, 5xx, Slack's ``ratelimited``; with the wait the sink asked for), or
refused. The retries, their backoff and the once-only rule belong to the outbox
(:mod:`opsagent.service.outbox`), which keeps them in the store. Every post carries the
notification's stable key as an ``Idempotency-Key`` header, so a sink that took a post whose answer
never arrived recognises the retry. URLs and tokens are never logged or printed.
"""

from __future__ import annotations

import asyncio
from datetime import UTC
from typing import Any, Literal, Protocol

import httpx
import structlog
from pydantic import BaseModel, Field

from opsagent.models import Report
from opsagent.retrying import RETRYABLE_STATUS, retry_after
from opsagent.settings import Settings
from opsagent.sizecap import BodyTooLarge, size_cap
from opsagent.store import IncidentRecord
from opsagent.store.outbox import OutboxEvent, notification_key

log = structlog.get_logger("opsagent.service.notifier")

#: Slack's limits: header text, section text, blocks per message.
_HEADER, _SECTION = 150, 3000
#: Evidence items a message shows.
TOP_EVIDENCE = 3


#: The header a sink receives the notification's stable key in (draft-ietf-httpapi-idempotency-key-header).
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: Slack's Web API method that posts a message and answers with its ``ts``.
SLACK_POST = "https://slack.com/api/chat.postMessage"
#: The most a sink's answer may hold: Slack's is a few hundred bytes, a router's an acknowledgement.
#: A longer one is not read (:mod:`opsagent.sizecap`) and counts as an answer that never came.
SINK_ANSWER_BYTES = 1024 * 1024
#: Slack Web API errors (HTTP 200, ``ok: false``) another attempt may get past; the rest are refusals.
SLACK_TRANSIENT = frozenset({"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"})


class Delivery(BaseModel):
    """How one post went."""

    outcome: Literal["sent", "retry", "refused"]
    problem: str | None = None
    #: seconds the sink asked to wait before the next try (``Retry-After``)
    wait_s: float | None = None
    #: the post's Slack ``ts``: later posts about the incident reply in its thread
    thread: str | None = None


class Sink(Protocol):
    """Where notifications go: ``name`` is what the outbox keeps its rows under."""

    name: str

    async def deliver(
        self, incident: IncidentRecord, report: Report | None, *, key: str, event: OutboxEvent, thread: str | None
    ) -> Delivery: ...

    async def aclose(self) -> None: ...


def report_link(incident: IncidentRecord, public_url: str | None) -> str:
    path = f"/incidents/{incident.id}.html"
    return public_url.rstrip("/") + path if public_url else path


def verdict_line(incident: IncidentRecord) -> str:
    if incident.outcome in ("confirmed", "probable") and incident.root_component:
        return f"{incident.outcome}: {incident.root_kind} on {incident.root_component}"
    if incident.outcome == "failed":
        return f"investigation failed: {incident.error or 'unknown error'}"
    return "inconclusive — needs a human"


def message(
    incident: IncidentRecord,
    link: str,
    report: Report | None = None,
    *,
    key: str | None = None,
    event: OutboxEvent = "investigated",
) -> dict[str, Any]:
    """The Slack message: Block Kit, and the same facts as plain text for what cannot show blocks.

    Every message names its notification's stable ``key`` (the incident and what changed), the
    same on every retry: where it cannot go in a thread (an incoming webhook), that is what ties an
    update to the incident, and what tells a post Slack took twice from two notifications."""
    key = key or notification_key(incident.id, event)
    if event == "resolved":
        return _resolution(incident, link, key)
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
        blocks.append(_button(link))
    context = f"opsagent · {key} · {incident.service}"
    if report is not None:
        context += f" · {report.cost.steps} steps, {report.cost.tool_calls} tool calls"
    blocks.append(_context(context, link))
    return {"text": text, "blocks": blocks}


def _resolution(incident: IncidentRecord, link: str, key: str) -> dict[str, Any]:
    """An update: the alert resolved. It says which incident it updates (opened when, on what) and
    what the investigation found, so it reads on its own outside the incident's thread."""
    opened = incident.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    about = f"Update to incident {incident.id} ({incident.service}, opened {opened}): the alert resolved."
    if incident.investigation in ("queued", "running"):  # its result is the next message
        found = "Its investigation has not ended yet: its result follows."
    elif incident.outcome == "failed":
        found = f"Its investigation failed: {incident.error or 'unknown error'}."
    else:
        found = f"The investigation found: {verdict_line(incident)}."
    text = f"*Resolved: {_mrkdwn(incident.title)}*\n{_mrkdwn(about)}\n{_mrkdwn(found)}\n<{link}|report {incident.id}>"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut("Resolved: " + incident.title, _HEADER)}},
        _section(f"{_mrkdwn(about)}\n{_mrkdwn(found)}"),
    ]
    if link.startswith(("http://", "https://")):
        blocks.append(_button(link))
    blocks.append(_context(f"opsagent · {key} · {incident.service}", link))
    return {"text": text, "blocks": blocks}


def _button(link: str) -> dict[str, Any]:
    return {
        "type": "actions",
        "elements": [{"type": "button", "text": {"type": "plain_text", "text": "Open the report"}, "url": link}],
    }


def _context(context: str, link: str) -> dict[str, Any]:
    if not link.startswith(("http://", "https://")):
        context += f" · report {link} (set public_url for a link)"
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": _mrkdwn(context)}]}


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
    event: Literal["investigation.finished", "incident.resolved"] = Field(
        default="investigation.finished", description="what changed: the investigation ended, or the alert resolved"
    )
    dedup_key: str = Field(description="the incident id: one per incident, for routers' deduplication")
    notification_key: str = Field(
        default="",
        description="this notification's stable key (incident and what changed), also sent as the Idempotency-Key"
        " header: a post seen twice under one key is one notification retried",
    )
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


def webhook_body(
    incident: IncidentRecord,
    link: str,
    report: Report | None = None,
    *,
    key: str = "",
    event: OutboxEvent = "investigated",
) -> WebhookBody:
    severity: Literal["critical", "warning", "info"] = (
        "info" if incident.state == "resolved" else "critical" if incident.outcome == "confirmed" else "warning"
    )
    return WebhookBody(
        event="incident.resolved" if event == "resolved" else "investigation.finished",
        dedup_key=incident.id,
        notification_key=key,
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
    """One sink: one POST of JSON a notification, its stable key in a header; the URL stays secret."""

    name = "sink"

    def __init__(
        self,
        url: str,
        *,
        public_url: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_s: float = 5.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._url = url
        self.public_url = public_url
        self.timeout_s = timeout_s
        self._client = httpx.AsyncClient(
            transport=transport,
            timeout=timeout_s,
            headers=headers,
            event_hooks={"response": [size_cap(SINK_ANSWER_BYTES)]},
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url=<secret>)"

    async def aclose(self) -> None:
        await self._client.aclose()

    def body(
        self, incident: IncidentRecord, report: Report | None, *, key: str, event: OutboxEvent, thread: str | None
    ) -> dict[str, Any]:
        raise NotImplementedError

    async def deliver(
        self, incident: IncidentRecord, report: Report | None, *, key: str, event: OutboxEvent, thread: str | None
    ) -> Delivery:
        body = self.body(incident, report, key=key, event=event, thread=thread)
        try:  # the whole exchange within the timeout: a sink that trickles its answer is a timeout too
            async with asyncio.timeout(self.timeout_s):
                response = await self._client.post(self._url, json=body, headers={IDEMPOTENCY_HEADER: key})
        except TimeoutError:
            return Delivery(outcome="retry", problem=f"no answer within {self.timeout_s:g} s")
        except httpx.HTTPError as exc:
            return Delivery(outcome="retry", problem=type(exc).__name__)
        except BodyTooLarge:  # its answer unread, as if it had never come: the same key goes again
            return Delivery(outcome="retry", problem=f"an answer longer than {SINK_ANSWER_BYTES:,} bytes")
        if response.is_success:
            return self.answered(response)
        problem = f"HTTP {response.status_code}"
        if response.status_code in RETRYABLE_STATUS:
            return Delivery(outcome="retry", problem=problem, wait_s=retry_after(response.headers))
        return Delivery(outcome="refused", problem=problem)  # retrying will not change the sink's mind

    def answered(self, response: httpx.Response) -> Delivery:
        return Delivery(outcome="sent")


class SlackNotifier(_Poster):
    """Slack through an incoming webhook (``url``), or through ``chat.postMessage`` when a
    ``channel`` is given (``url`` is then the method's, and ``token`` the bot token): the Web API
    answers with the post's ``ts``, so later messages about the incident go in its thread. An
    incoming webhook cannot thread (it answers ``ok``, no ``ts``): its updates are new messages
    that name the incident they update (:func:`message`)."""

    name = "slack"

    def __init__(
        self,
        url: str = SLACK_POST,
        *,
        channel: str | None = None,
        token: str | None = None,
        public_url: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        super().__init__(url, public_url=public_url, transport=transport, timeout_s=timeout_s, headers=headers)
        self.channel = channel

    def __repr__(self) -> str:
        return f"SlackNotifier(url=<secret>, channel={self.channel!r})"

    def body(
        self, incident: IncidentRecord, report: Report | None, *, key: str, event: OutboxEvent, thread: str | None
    ) -> dict[str, Any]:
        body = message(incident, report_link(incident, self.public_url), report, key=key, event=event)
        if self.channel is not None:
            body["channel"] = self.channel
            if thread is not None:
                body["thread_ts"] = thread
                # a resolution in a thread is easily missed: shown in the channel too
                body["reply_broadcast"] = event == "resolved"
        return body

    def answered(self, response: httpx.Response) -> Delivery:
        if self.channel is None:  # an incoming webhook answers "ok"
            return Delivery(outcome="sent")
        try:
            answer = response.json()
        except ValueError:
            return Delivery(outcome="retry", problem="Slack's answer is not JSON")
        if not isinstance(answer, dict):
            return Delivery(outcome="retry", problem="Slack's answer is not a JSON object")
        if answer.get("ok") is True:
            ts = answer.get("ts")
            return Delivery(outcome="sent", thread=ts if isinstance(ts, str) else None)
        error = str(answer.get("error", "unknown_error"))
        outcome: Literal["retry", "refused"] = "retry" if error in SLACK_TRANSIENT else "refused"
        return Delivery(outcome=outcome, problem=f"Slack: {error}", wait_s=retry_after(response.headers))


class WebhookNotifier(_Poster):
    name = "webhook"

    def body(
        self, incident: IncidentRecord, report: Report | None, *, key: str, event: OutboxEvent, thread: str | None
    ) -> dict[str, Any]:
        link = report_link(incident, self.public_url)
        return webhook_body(incident, link, report, key=key, event=event).model_dump(mode="json")


def sinks_from(settings: Settings) -> list[Sink]:
    """The sinks the settings configure: Slack (``slack_token`` and ``slack_channel``, or an incoming
    webhook ``notify_url``) and a generic JSON webhook (``notify_webhook_url``)."""
    sinks: list[Sink] = []
    if settings.slack_token is not None and settings.slack_channel:
        sinks.append(
            SlackNotifier(
                token=settings.slack_token.get_secret_value(),
                channel=settings.slack_channel,
                public_url=settings.public_url,
            )
        )
    elif settings.notify_url is not None:
        sinks.append(SlackNotifier(settings.notify_url.get_secret_value(), public_url=settings.public_url))
    if settings.notify_webhook_url is not None:
        sinks.append(WebhookNotifier(settings.notify_webhook_url.get_secret_value(), public_url=settings.public_url))
    return sinks
