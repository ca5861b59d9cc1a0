"""The webhook service's HTTP API as its callers see it: the shapes of its answers, the refusals the
webhook may answer, and the OpenAPI document (with the payload schemas the webhook validates)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field

from opsagent.models import Report
from opsagent.service.payload import GrafanaPayload, WebhookPayload
from opsagent.store import IncidentRecord


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


def problems_of(exc: RequestValidationError) -> list[Problem]:
    out = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ())]
        if loc and loc[0] == "body":
            loc = loc[1:]
        out.append(Problem(field=".".join(loc) or "body", message=str(err.get("msg", "")), type=str(err.get("type"))))
    return out


#: What the webhook may refuse a notification with, for the OpenAPI document.
REFUSALS: dict[int | str, dict[str, Any]] = {
    401: {"model": ProblemResponse, "description": "missing or wrong credentials"},
    408: {"model": ProblemResponse, "description": "the body did not arrive in time"},
    413: {"model": ProblemResponse, "description": "body over the size limit"},
    415: {"model": ProblemResponse, "description": "the body is not JSON"},
    422: {"model": ProblemResponse, "description": "not a version 4 Alertmanager payload; names the field"},
    503: {"model": ProblemResponse, "description": "could not be stored; Alertmanager retries"},
}


def posted(schema: str) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
        },
        "security": [{"bearer": []}, {"basic": []}],
    }


def openapi_of(app: FastAPI) -> dict[str, Any]:
    """The service's OpenAPI document, with the webhook payloads' schemas and both kinds of credentials."""
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
