"""Health and the service's own metrics: ``/healthz`` (alive), ``/readyz`` (a notification could
be stored now; the dispatcher runs where this process investigates) and ``/metrics``. Served by
every role, to anyone for the probes."""

from __future__ import annotations

import structlog
from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from opsagent.service.api import ProblemResponse
from opsagent.service.metrics import ServiceMetrics
from opsagent.service.running import Running
from opsagent.store import StoreError

log = structlog.get_logger("opsagent.service")


def health_routes(running: Running, *, metrics: ServiceMetrics) -> APIRouter:
    """``GET /healthz``, ``/readyz`` and ``/metrics``."""
    router = APIRouter()

    @router.get("/healthz", tags=["health"], openapi_extra={"security": []})
    async def healthz() -> dict[str, str]:
        """The process answers."""
        return {"status": "ok"}

    unready: list[str] = []  # the reason last reported, so a failing probe is logged once, not every time

    @router.get("/readyz", tags=["health"], responses={503: {"model": ProblemResponse}}, openapi_extra={"security": []})
    async def readyz() -> JSONResponse:
        """Ready to accept: a notification could be written now (the accept path is tried and
        rolled back) and, where this process runs investigations, the dispatcher runs."""
        p = running.parts
        if p is None or (p.dispatcher is not None and not p.dispatcher.alive):
            return JSONResponse(ProblemResponse(detail="not ready").model_dump(), status_code=503)
        try:
            await p.store.check_writable()
            counts = await p.store.job_counts(("queued", "running"))
        except StoreError as exc:
            # The why (a file path, a PostgreSQL role, host and database) goes to the operator's log;
            # this endpoint answers anyone, so it says only what is wrong.
            reason = f"the store cannot be written: {exc}"
            if unready != [reason]:
                log.error("service.not_ready", error=reason)
                unready[:] = [reason]
            return JSONResponse(ProblemResponse(detail="store not writable").model_dump(), status_code=503)
        if unready:
            log.info("service.ready")
            unready.clear()
        return JSONResponse({"status": "ready", "queued": counts["queued"], "running": counts["running"]})

    @router.get("/metrics", tags=["health"], response_class=Response)
    async def prometheus_metrics() -> Response:
        """The service's own metrics, Prometheus text format."""
        p = running.parts
        if p is not None:
            counts = await p.store.job_counts(("queued", "running"))
            for state in ("queued", "running"):
                metrics.queue_depth.labels(state=state).set(counts[state])
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return router
