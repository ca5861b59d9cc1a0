"""The routes that read incidents: the list, one incident with its report (JSON), its report page
and the index page."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import structlog
from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import ValidationError

from opsagent.models import Report
from opsagent.service.api import IncidentDetail, IncidentList, ProblemResponse
from opsagent.service.charts import Chart
from opsagent.service.pages import incident_page, index_page, not_found_page
from opsagent.service.running import Running
from opsagent.store import IncidentRecord, InvestigationState, ServiceStore

log = structlog.get_logger("opsagent.service")


def incident_routes(running: Running) -> APIRouter:
    """``GET /incidents``, ``/incidents/{id}``, ``/incidents/{id}.html`` and ``/``."""
    web = APIRouter()
    current = running.current

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

    return web


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
