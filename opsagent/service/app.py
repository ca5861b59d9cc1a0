"""The webhook service: Alertmanager in, incidents and their reports out.

    POST /webhook/alertmanager    a notification; 202 once it is on disk (401, 408, 413, 415, 422, 503)
    POST /webhook/grafana         a Grafana-managed alerting notification, handled as Alertmanager's
    GET  /incidents               incidents, most recent first (?status=firing|resolved, ?service=…)
    GET  /incidents/{id}          the incident and its report, JSON
    GET  /incidents/{id}.html     the report page, with charts of the cited series
    GET  /                        recent incidents
    GET  /healthz, /readyz        alive; ready (the store can be written, the dispatcher runs)
    GET  /metrics                 the service's own Prometheus metrics

A worker process (``opsagent worker``) serves only the last three.

:func:`create_app` wires the parts, one concern a module: ``guard`` (credentials, body limits),
``webhook`` (accepting notifications), ``incidents`` (reading incidents, report pages), ``health``
(probes, /metrics), ``running`` (the parts the lifespan starts and stops), ``api`` (the answers'
shapes, the OpenAPI document).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Literal

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from opsagent.correlation import Correlator, topology_of
from opsagent.service.api import ProblemResponse, openapi_of, problems_of
from opsagent.service.auth import Credentials
from opsagent.service.guard import WEBHOOK_PREFIX, Guard
from opsagent.service.health import health_routes
from opsagent.service.incidents import incident_routes
from opsagent.service.metrics import ServiceMetrics
from opsagent.service.notifier import Sink
from opsagent.service.provider import SourceProvider, known_topology
from opsagent.service.running import Role, Running, lifespan
from opsagent.service.webhook import webhook_routes
from opsagent.service.worker import worker_config
from opsagent.settings import Settings, load_settings
from opsagent.store import StoreError

log = structlog.get_logger("opsagent.service")

__all__ = ["Role", "create_app"]


def create_app(
    settings: Settings | None = None,
    *,
    provider: SourceProvider | None = None,
    runner: Literal["process", "thread"] = "process",
    sinks: Sequence[Sink] | None = None,
    metrics: ServiceMetrics | None = None,
    poll_s: float = 2.0,
    log_level: str = "info",
    role: Role = "all",
) -> FastAPI:
    """The service, ready for uvicorn. Raises :class:`~opsagent.errors.ConfigError` when the
    webhook has no credentials (and is not explicitly open) or the configuration is inconsistent.

    ``role``: ``all`` accepts, serves pages and runs investigations (``opsagent serve``); ``web``
    accepts and serves pages, leaving the jobs to workers elsewhere (``serve --no-workers``);
    ``worker`` runs investigations only, answering health probes and /metrics
    (``opsagent worker``)."""
    settings = settings or load_settings()
    if role == "worker":  # no webhook here: its credentials, if any, only open /metrics
        credentials = Credentials(
            token=settings.webhook_token, username=settings.webhook_username, password=settings.webhook_password
        )
    else:
        credentials = Credentials.from_settings(settings)
    readers = Credentials.readers_from_settings(settings)
    metrics = metrics or ServiceMetrics()
    config = worker_config(settings, provider=provider, log_level=log_level)
    correlator: Callable[[], Correlator] | None = None
    if settings.correlation.enabled and role != "worker":
        # the graph is fixed for the process's life: built once, each transaction's correlator reads it
        correlator = partial(
            Correlator.of, settings.correlation, topology_of(settings.correlation, known_topology(config.provider))
        )
    running = Running()

    app = FastAPI(
        title="opsagent",
        summary="Alertmanager webhook receiver: every alert group investigated once, its report served.",
        version="1",
        lifespan=lifespan(
            running,
            settings=settings,
            role=role,
            config=config,
            runner=runner,
            sinks=sinks,
            metrics=metrics,
            poll_s=poll_s,
            credentials=credentials,
            readers=readers,
            correlator=correlator,
        ),
    )
    app.add_middleware(
        Guard,
        credentials=credentials,
        readers=readers,
        max_body=settings.max_body_bytes,
        metrics=metrics,
        body_timeout_s=settings.body_timeout_s,
    )

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = problems_of(exc)
        if request.url.path.startswith(WEBHOOK_PREFIX):
            metrics.rejected.labels(reason="invalid").inc()
        detail = "; ".join(f"{p.field}: {p.message}" for p in problems)
        body = ProblemResponse(detail=detail, errors=problems)
        return JSONResponse(body.model_dump(), status_code=422)

    @app.exception_handler(StoreError)
    async def store_down(request: Request, exc: StoreError) -> JSONResponse:
        log.error("service.store_error", path=request.url.path, error=str(exc))
        return JSONResponse(ProblemResponse(detail="the store is unavailable; retry").model_dump(), status_code=503)

    app.include_router(health_routes(running, metrics=metrics))
    if role != "worker":  # what a worker does not serve
        app.include_router(webhook_routes(running, correlator=correlator, metrics=metrics))
        app.include_router(incident_routes(running))
    app.openapi = lambda: openapi_of(app)  # type: ignore[method-assign]
    return app
