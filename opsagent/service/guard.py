"""The guard in front of the service: credentials first, then the webhook body's size, type and
arrival time, before anything reads or parses it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import structlog
from fastapi import HTTPException

from opsagent.service.api import ProblemResponse
from opsagent.service.auth import Credentials
from opsagent.service.metrics import ServiceMetrics

log = structlog.get_logger("opsagent.service")

WEBHOOK_PREFIX = "/webhook/"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


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
