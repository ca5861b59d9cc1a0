"""``opsagent serve`` and ``opsagent worker``: the webhook service on uvicorn, and its investigations on
hosts of their own. Wired into the main CLI by :func:`register`."""

from __future__ import annotations

import copy
import gc
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import uvicorn
from pydantic import ValidationError

from opsagent.cli.common import fail
from opsagent.cli.loglevel import LogLevelOpt, log_level_ok
from opsagent.errors import UserError
from opsagent.logconfig import configure
from opsagent.redaction import redact_query
from opsagent.settings import Settings, load_settings
from opsagent.store import Store

if TYPE_CHECKING:
    from opsagent.service.app import Role


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


def _start(
    *,
    role: Role,
    host: str | None,
    port: int | None,
    workers: int | None,
    fixtures: Path | None,
    data_dir: Path | None,
    log_level: str,
    access_log: bool,
) -> None:
    from opsagent.service.app import create_app  # FastAPI is imported only by these commands

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
        with Store(settings.store) as store:  # a store that cannot be opened or written: said here, once
            store.check_writable()
        app = create_app(settings, log_level=log_level, role=role)
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


HostOpt = Annotated[str | None, typer.Option("--host", metavar="ADDRESS", help="listen address (config: host)")]
PortOpt = Annotated[int | None, typer.Option("--port", metavar="PORT", help="listen port (config: port)")]
WorkersOpt = Annotated[
    int | None,
    typer.Option("--workers", metavar="N", help="investigations at once, each in its own process (config: workers)"),
]
FixturesOpt = Annotated[
    Path | None,
    typer.Option(
        "--fixtures", metavar="DIR", help="recorded incidents to investigate alerts against (config: fixtures_dir)"
    ),
]
DataDirOpt = Annotated[
    Path | None,
    typer.Option("--data-dir", metavar="DIR", help="where the SQLite store lives (config: data_dir)"),
]
AccessLogOpt = Annotated[bool, typer.Option("--access-log/--no-access-log", metavar="", help="log every request")]


def serve(
    host: HostOpt = None,
    port: PortOpt = None,
    workers: WorkersOpt = None,
    fixtures: FixturesOpt = None,
    data_dir: DataDirOpt = None,
    no_workers: Annotated[
        bool,
        typer.Option(
            "--no-workers",
            metavar="",
            help="accept and serve pages only; `opsagent worker` processes run the investigations",
        ),
    ] = False,
    log_level: LogLevelOpt = "info",
    access_log: AccessLogOpt = False,
) -> None:
    """Run the Alertmanager webhook service: incidents API, report pages, health and /metrics.

    Credentials come from the environment only: OPSAGENT_WEBHOOK_TOKEN (bearer), or
    OPSAGENT_WEBHOOK_USERNAME and OPSAGENT_WEBHOOK_PASSWORD (basic auth)."""
    _start(
        role="web" if no_workers else "all",
        host=host,
        port=port,
        workers=workers,
        fixtures=fixtures,
        data_dir=data_dir,
        log_level=log_level,
        access_log=access_log,
    )


def worker(
    host: HostOpt = None,
    port: PortOpt = None,
    workers: WorkersOpt = None,
    fixtures: FixturesOpt = None,
    data_dir: DataDirOpt = None,
    log_level: LogLevelOpt = "info",
    access_log: AccessLogOpt = False,
) -> None:
    """Run investigations only: lease jobs from the shared store (store_url: postgresql://…), run
    them, store their reports. Answers /healthz, /readyz and /metrics on --port, nothing else."""
    _start(
        role="worker",
        host=host,
        port=port,
        workers=workers,
        fixtures=fixtures,
        data_dir=data_dir,
        log_level=log_level,
        access_log=access_log,
    )


def register(app: typer.Typer) -> None:
    """Add the ``serve`` and ``worker`` commands to a typer app."""
    app.command(name="serve")(serve)
    app.command(name="worker")(worker)
