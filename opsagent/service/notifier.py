"""The optional notification sink: a short summary of a finished investigation, with a link to its
report page, POSTed as Slack-compatible JSON (``{"text": …}``; Mattermost, Rocket.Chat and most chat
webhooks take the same). Retried with backoff on network errors, 429 and 5xx. The URL usually holds
a token, so it is never logged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import httpx
import structlog

from opsagent.service.metrics import ServiceMetrics
from opsagent.store import IncidentRecord

log = structlog.get_logger("opsagent.service.notifier")


class Notifier(Protocol):
    async def notify(self, incident: IncidentRecord) -> bool: ...


def report_link(incident: IncidentRecord, public_url: str | None) -> str:
    path = f"/incidents/{incident.id}.html"
    return public_url.rstrip("/") + path if public_url else path


def message(incident: IncidentRecord, link: str) -> dict[str, Any]:
    if incident.outcome in ("confirmed", "probable") and incident.root_component:
        verdict = f"{incident.outcome}: {incident.root_kind} on {incident.root_component}"
    elif incident.outcome == "failed":
        verdict = f"investigation failed: {incident.error or 'unknown error'}"
    else:
        verdict = "inconclusive — needs a human"
    state = " (resolved)" if incident.state == "resolved" else ""
    text = f"*{incident.title}*{state}\n{verdict}\n<{link}|report {incident.id}>"
    return {"text": text}


class SlackNotifier:
    def __init__(
        self,
        url: str,
        *,
        public_url: str | None = None,
        metrics: ServiceMetrics | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        attempts: int = 4,
        backoff_s: float = 0.5,
        timeout_s: float = 5.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._url = url
        self.public_url = public_url
        self.metrics = metrics
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.sleep = sleep
        self._client = httpx.AsyncClient(transport=transport, timeout=timeout_s)

    def __repr__(self) -> str:
        return "SlackNotifier(url=<secret>)"

    async def aclose(self) -> None:
        await self._client.aclose()

    async def notify(self, incident: IncidentRecord) -> bool:
        body = message(incident, report_link(incident, self.public_url))
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            retry_after: float | None = None
            try:
                response = await self._client.post(self._url, json=body)
            except httpx.HTTPError as exc:
                problem = type(exc).__name__
            else:
                if response.is_success:
                    log.info("notify.sent", incident_id=incident.id, attempt=attempt)
                    self._count("sent")
                    return True
                problem = f"HTTP {response.status_code}"
                if response.status_code != 429 and response.status_code < 500:
                    break  # the sink refuses this message: retrying will not change its mind
                retry_after = _seconds(response.headers.get("retry-after"))
            if attempt < self.attempts:
                log.info("notify.retry", incident_id=incident.id, attempt=attempt, problem=problem)
                await self.sleep(min(retry_after if retry_after is not None else delay, 30.0))
                delay *= 2
        log.warning("notify.failed", incident_id=incident.id, problem=problem)
        self._count("failed")
        return False

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.notify.labels(result=result).inc()


def _seconds(value: str | None) -> float | None:
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None
