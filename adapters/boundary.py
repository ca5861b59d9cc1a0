"""The adapters' boundary: foreign exceptions and HTTP answers translated into the project's own.

Each adapter keeps one table, ``(foreign exception class, project error class)`` rows tried in
order, and translates with :func:`translate` inside ``except`` so the project error is raised
``from`` the foreign one. :func:`status_error` says what an HTTP status means for a read-only
client; :func:`error_text` pulls the message out of the error bodies the supported APIs send.
Tests check that every exception class the client libraries define has a row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

import httpx
from pydantic import ValidationError

from opsagent.errors import (
    AnswerTooLarge,
    MalformedResponse,
    QueryRejected,
    SourceAuthFailed,
    SourceError,
    SourceTimeout,
    SourceUnavailable,
)
from opsagent.redaction import scrub
from opsagent.sizecap import BodyTooLarge

ErrorTable = Sequence[tuple[type[BaseException], type[SourceError]]]
Window = tuple[datetime, datetime] | None

#: Shapes a parser rejects: the answer is not what the API documents.
MALFORMED: ErrorTable = (
    (json.JSONDecodeError, MalformedResponse),
    (ValidationError, MalformedResponse),
    (KeyError, MalformedResponse),
    (IndexError, MalformedResponse),
    (TypeError, MalformedResponse),
    (ValueError, MalformedResponse),
)

#: httpx, for the readers that speak HTTP themselves (Jaeger, Tempo, a change feed).
HTTPX_ERRORS: ErrorTable = (
    (BodyTooLarge, AnswerTooLarge),
    (httpx.TimeoutException, SourceTimeout),
    (httpx.DecodingError, MalformedResponse),
    (httpx.TooManyRedirects, SourceUnavailable),
    (httpx.TransportError, SourceUnavailable),  # connect, read, write, protocol, proxy, bad URL scheme
    (httpx.InvalidURL, SourceUnavailable),
    (httpx.CookieConflict, SourceUnavailable),
    (httpx.StreamError, SourceUnavailable),
    (httpx.HTTPError, SourceUnavailable),
    *MALFORMED,
)

_MAX_MESSAGE = 300
#: An error page can be large: only its start is read (and redacted) for the message.
_MAX_SCANNED = 16_384


def status_error(status: int) -> type[SourceError]:
    """What an HTTP error status means to a read-only client."""
    if status in (401, 403, 407):
        return SourceAuthFailed
    if status in (408, 504):
        return SourceTimeout
    if status in (400, 406, 413, 414, 422):
        return QueryRejected
    return SourceUnavailable  # 404 (wrong URL or index), 429, 5xx


def error_text(body: object) -> str:
    """The human part of an error body (Prometheus, Elasticsearch, Jaeger and plain-text shapes),
    redacted before it is shortened: a cut could leave too little of a secret for its shape to show."""
    return scrub(_error_text(body)[:_MAX_SCANNED])[:_MAX_MESSAGE]


def _error_text(body: object) -> str:
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        text = body
        try:
            body = json.loads(text)
        except ValueError:
            return text.strip()
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):  # Elasticsearch: {"error": {"root_cause": [...], "type", "reason"}}
            causes = err.get("root_cause") or []
            cause = causes[0] if causes and isinstance(causes[0], dict) else err
            text = f"{cause.get('type', 'error')}: {cause.get('reason', '')}"
            return text
        if isinstance(err, str):  # Prometheus: {"status": "error", "errorType": ..., "error": ...}
            kind = body.get("errorType")
            return f"{kind}: {err}" if kind else err
        errors = body.get("errors")
        if isinstance(errors, list) and errors and isinstance(errors[0], dict):  # Jaeger
            return str(errors[0].get("msg", errors[0]))
    if isinstance(body, dict | list):
        return json.dumps(body, ensure_ascii=False)  # quoted as JSON, a "password": "…" pair reads as one
    return str(body)


def translate(
    exc: BaseException,
    table: ErrorTable,
    *,
    source: str,
    query: str | None = None,
    window: Window = None,
    message: str | None = None,
) -> SourceError:
    """The project error for a foreign one; an unlisted exception is a plain :class:`SourceError`."""
    if isinstance(exc, SourceError):
        return exc
    if isinstance(exc, BodyTooLarge):
        return AnswerTooLarge(str(exc), source=source, limit=exc.limit, query=query, window=window)
    text = message or f"{type(exc).__name__}: {exc}".rstrip(": ")
    for foreign, ours in table:
        if isinstance(exc, foreign):
            return ours(text, source=source, query=query, window=window)
    return SourceError(text, source=source, query=query, window=window)


def mapped_by(cls: type[BaseException], table: ErrorTable) -> type[SourceError] | None:
    """The row of a table that catches an exception class (for the completeness tests)."""
    return next((ours for foreign, ours in table if issubclass(cls, foreign)), None)


def http_error(
    response: httpx.Response, *, source: str, query: str | None = None, window: Window = None
) -> SourceError:
    """The project error for an httpx error response."""
    kind = status_error(response.status_code)
    return kind(
        f"HTTP {response.status_code}: {error_text(response.content)}",
        source=source,
        query=query,
        window=window,
        status=response.status_code,
    )
