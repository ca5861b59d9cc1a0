"""Alertmanager as a source of triggers: what is firing now, through its v2 API, over httpx.

``GET /api/v2/alerts`` with Alertmanager's own filters (``filter`` matchers such as
``alertname="X"`` or ``service=~"check.*"``, ``active``, ``silenced``, ``inhibited``,
``unprocessed``, ``receiver``); each answer (a ``gettableAlert``) becomes the project's
:class:`~opsagent.models.Alert`, the trigger an investigation starts from. Read-only: it only sends
GET. The httpx client is injected; its errors are translated here, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import httpx
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from adapters.boundary import HTTPX_ERRORS, http_error, translate
from opsagent.errors import MalformedResponse
from opsagent.models import Alert, AlertEnd


class AlertStatus(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    state: str = Field(description="active, suppressed or unprocessed")
    silenced_by: list[str] = Field(default_factory=list, alias="silencedBy")
    inhibited_by: list[str] = Field(default_factory=list, alias="inhibitedBy")


class Receiver(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str


class FiringAlert(BaseModel):
    """One alert as ``GET /api/v2/alerts`` returns it (the ``gettableAlert`` of Alertmanager's OpenAPI)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    starts_at: AwareDatetime = Field(alias="startsAt")
    ends_at: AlertEnd = Field(default=None, alias="endsAt")
    updated_at: AwareDatetime | None = Field(default=None, alias="updatedAt")
    generator_url: str | None = Field(default=None, alias="generatorURL")
    fingerprint: str
    status: AlertStatus
    receivers: list[Receiver] = Field(default_factory=list)

    def alert(self) -> Alert:
        """The trigger, as the webhook would have delivered it."""
        return Alert.model_validate(
            {
                "labels": self.labels,
                "annotations": self.annotations,
                "startsAt": self.starts_at,
                "endsAt": self.ends_at,
                "generatorURL": self.generator_url,
                "fingerprint": self.fingerprint,
                "status": "firing",
            }
        )


class AlertmanagerClient:
    def __init__(self, client: httpx.AsyncClient, *, name: str = "main") -> None:
        self.client = client
        self.name = f"alertmanager:{name}"

    async def alerts(
        self,
        *,
        filters: Sequence[str] = (),
        active: bool = True,
        silenced: bool = False,
        inhibited: bool = False,
        unprocessed: bool = True,
        receiver: str | None = None,
    ) -> list[FiringAlert]:
        """What Alertmanager holds that matches every filter, newest first. By default what pages a
        human now: active, not silenced, not inhibited."""
        params: list[tuple[str, str | int | float | bool | None]] = [
            ("active", _flag(active)),
            ("silenced", _flag(silenced)),
            ("inhibited", _flag(inhibited)),
            ("unprocessed", _flag(unprocessed)),
            *(("filter", f) for f in filters),
        ]
        if receiver:
            params.append(("receiver", receiver))
        described = "GET /api/v2/alerts " + " ".join(f"{k}={v}" for k, v in params if k in ("filter", "receiver"))
        try:
            response = await self.client.get("/api/v2/alerts", params=params)
        except Exception as exc:
            raise translate(exc, HTTPX_ERRORS, source=self.name, query=described) from exc
        if response.is_error:
            raise http_error(response, source=self.name, query=described)
        try:
            raw = response.json()
            if not isinstance(raw, list):
                raise ValueError("expected a list of alerts")
            found = [FiringAlert.model_validate(a) for a in raw]
        except (ValueError, ValidationError) as exc:
            raise MalformedResponse(f"not an Alertmanager answer: {exc}", source=self.name, query=described) from exc
        return sorted(found, key=lambda a: (a.starts_at, a.fingerprint), reverse=True)

    async def alert(self, fingerprint: str) -> FiringAlert | None:
        """One alert by fingerprint, whatever its state (silenced and inhibited alerts too)."""
        every = await self.alerts(active=True, silenced=True, inhibited=True, unprocessed=True)
        return next((a for a in every if a.fingerprint == fingerprint), None)

    async def aclose(self) -> None:
        await self.client.aclose()


def _flag(value: bool) -> str:
    return "true" if value else "false"


def started(alert: FiringAlert, now: datetime) -> str:
    """How long ago an alert started, for people: 4m, 2h10m, 3d."""
    seconds = max(int((now - alert.starts_at).total_seconds()), 0)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    return f"{minutes}m"
