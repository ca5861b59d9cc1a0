"""``opsagent serve``: the webhook service on uvicorn (also ``python -m opsagent.service serve``)."""

from __future__ import annotations

import copy
import gc
import logging
from pathlib import Path
from typing import Annotated, Any

import typer
import uvicorn
from pydantic import ValidationError

from opsagent.cli.common import fail
from opsagent.cli.options import LogLevelOpt, log_level_ok
from opsagent.errors import UserError
from opsagent.logconfig import configure
from opsagent.redaction import redact_query
from opsagent.settings import Settings, load_settings
from opsagent.store import Store


class AccessLogRedaction(logging.Filter):
    """uvicorn's access log, with credentials in the request target masked (a client that puts a
    token in the query string, ``?access_token=…``, must not write it into the log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            record.args = (args[0], args[1], redact_query(args[2]), args[3], args[4])
        return True


def log_config() -> dict[str, Any]:
    """uvicorn's own logging set-up, with :class:`AccessLogRedaction` on the access log."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config.setdefault("filters", {})["redacted"] = {"()": AccessLogRedaction}
    config["handlers"]["access"]["filters"] = ["redacted"]
    return config


def serve(
    host: Annotated[str | None, typer.Option("--host", metavar="ADDRESS", help="listen address (config: host)")] = None,
    port: Annotated[int | None, typer.Option("--port", metavar="PORT", help="listen port (config: port)")] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers", metavar="N", help="investigations at once, each in its own process (config: workers)"
        ),
    ] = None,
    fixtures: Annotated[
        Path | None,
        typer.Option(
            "--fixtures",
            metavar="DIR",
            help="recorded incidents to investigate alerts against (config: fixtures_dir)",
        ),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", metavar="DIR", help="where the store lives (config: data_dir)")
    ] = None,
    log_level: LogLevelOpt = "info",
    access_log: Annotated[
        bool, typer.Option("--access-log/--no-access-log", metavar="", help="log every request")
    ] = False,
) -> None:
    """Run the Alertmanager webhook service: incidents API, report pages, health and /metrics.

    Credentials come from the environment only: OPSAGENT_WEBHOOK_TOKEN (bearer), or
    OPSAGENT_WEBHOOK_USERNAME and OPSAGENT_WEBHOOK_PASSWORD (basic auth)."""
    from opsagent.service.app import create_app  # FastAPI is imported only by this command

    log_level_ok(log_level)
    overrides: dict[str, Any] = {
        k: v
        for k, v in {
            "host": host,
            "port": port,
            "workers": workers,
            "fixtures_dir": fixtures,
            "data_dir": data_dir,
        }.items()
        if v is not None
    }
    try:
        settings = load_settings()
        try:  # the options win over the environment and the file, validated like them
            settings = Settings(**overrides) if overrides else settings
        except ValidationError as exc:
            problems = "; ".join(
                f"--{'.'.join(map(str, e['loc'])).replace('_', '-')}: {e['msg']}" for e in exc.errors()
            )
            raise UserError(problems) from None
        if settings.fixtures_dir is not None and not settings.fixtures_dir.is_dir():
            raise UserError(f"fixtures directory {settings.fixtures_dir} does not exist")
        with Store(settings.database) as store:  # a store that cannot be opened or written: said here, once
            store.check_writable()
        app = create_app(settings, log_level=log_level)
    except UserError as exc:
        fail(str(exc))
    configure(level=log_level, json=True)
    # Everything built so far (modules, the app, its schemas) lives as long as the process. Frozen, it
    # is no longer re-scanned by full collections, which otherwise stall every answer ~40 ms under load.
    gc.collect()
    gc.freeze()
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        access_log=access_log,
        log_config=log_config(),
        log_level=log_level.lower(),
        timeout_graceful_shutdown=10,
    )


def register(app: typer.Typer) -> None:
    """Add the ``serve`` command to a typer app."""
    app.command(name="serve")(serve)
