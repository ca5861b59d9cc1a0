"""Changes from an HTTP JSON change feed (a deploy tracker's API), over httpx.

A changes *reader* (:class:`opsagent.sources.readers.ChangesReader`): one GET with the time range (and
optionally the service) as query parameters; where the list sits in the answer, what each field is
called and how times are written are configuration. Read-only: it only sends GET. The httpx client
(base URL, auth headers, TLS) is injected; its errors are translated here, once.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import ValidationError

from adapters.boundary import HTTPX_ERRORS, http_error, translate
from adapters.changes_http.config import FeedFields, FeedQuery, TimeFormat
from opsagent.errors import MalformedResponse
from opsagent.fixtures import Change

_KINDS = ("deploy", "rollout", "config", "flag", "infra", "scale")


class HttpChangesReader:
    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        name: str,
        query: FeedQuery | None = None,
        fields: FeedFields | None = None,
    ) -> None:
        self.client = client
        self.name = f"changes:{name}"
        self.query = query or FeedQuery()
        self.fields = fields or FeedFields()

    async def changes(self, *, start: datetime, end: datetime, service: str | None) -> list[Change]:
        q = self.query
        params = {**q.params, q.since_param: _format(start, q.time_format), q.until_param: _format(end, q.time_format)}
        if service and q.service_param:
            params[q.service_param] = service
        window = (start, end)
        described = f"GET {q.path or '/'}"
        try:
            response = await self.client.get(q.path, params=params)
        except Exception as exc:
            raise translate(exc, HTTPX_ERRORS, source=self.name, query=described, window=window) from exc
        if response.is_error:
            raise http_error(response, source=self.name, query=described, window=window)
        try:
            items = _at(response.json(), q.items)
            if not isinstance(items, list):
                raise TypeError(f"{q.items or 'the answer'} is not a list")
            changes = [self._change(item) for item in items]
        except (ValueError, TypeError, KeyError, ValidationError) as exc:
            raise MalformedResponse(
                f"not a change feed answer: {exc}", source=self.name, query=described, window=window
            ) from exc
        return [c for c in changes if start <= c.ts < end and (service is None or c.service == service)]

    def _change(self, item: Mapping[str, Any]) -> Change:
        f = self.fields

        def get(path: str | None) -> Any:
            return _at(item, path) if path else None

        def maybe(path: str | None) -> Any:  # fields only rollouts carry
            return _at(item, path) if path and _has(item, path) else None

        raw_kind = str(get(f.kind) or self.query.default_kind)
        kind = self.query.kinds.get(raw_kind, raw_kind)
        end = maybe(f.end)  # a rollout in progress has none yet
        return Change.model_validate(
            {
                "id": str(get(f.id)),
                "ts": _parse(get(f.ts)),
                "end": _parse(end) if end else None,
                "service": str(get(f.service)),
                "kind": kind if kind in _KINDS else self.query.default_kind,
                "summary": str(get(f.summary) or ""),
                "author": _text(get(f.author)),
                "from_version": _text(get(f.from_version)),
                "to_version": _text(get(f.to_version)),
                "diff": _text(get(f.diff)),
                "steps": [self._step(step) for step in _listed(maybe(f.steps), f.steps)],
                "pods": maybe(f.pods) or {},
                "url": _text(get(f.url)),
            }
        )

    def _step(self, step: Any) -> dict[str, Any]:
        f = self.fields
        if not isinstance(step, Mapping):
            raise TypeError(f"a step of {f.steps} is not an object: {step!r}")
        return {
            "ts": _parse(_at(step, f.step_ts)),
            "id": _text(step.get("id")),
            "index": step.get("index"),
            "weight": _at(step, f.step_weight) if f.step_weight and _has(step, f.step_weight) else None,
            "pods": (_at(step, f.step_pods) if f.step_pods and _has(step, f.step_pods) else None) or [],
            "summary": _text(step.get("summary")),
        }


def _at(data: Any, path: str) -> Any:
    for part in path.split(".") if path else []:
        if not isinstance(data, Mapping):
            raise KeyError(path)
        data = data[part]
    return data


def _listed(value: Any, path: str | None) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"{path} is not a list")
    return value


def _has(data: Mapping[str, Any], path: str) -> bool:
    try:
        _at(data, path)
    except KeyError:
        return False
    return True


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _format(ts: datetime, fmt: TimeFormat) -> str:
    if fmt == "unix":
        return str(int(ts.timestamp()))
    if fmt == "unix_ms":
        return str(int(ts.timestamp() * 1000))
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _parse(value: Any) -> datetime:
    """RFC 3339, or epoch seconds / milliseconds (told apart by size)."""
    if isinstance(value, int | float) or (isinstance(value, str) and value.replace(".", "", 1).isdigit()):
        number = float(value)
        return datetime.fromtimestamp(number / 1000 if number > 1e11 else number, tz=UTC)
    if not isinstance(value, str):
        raise TypeError(f"not a time: {value!r}")
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
