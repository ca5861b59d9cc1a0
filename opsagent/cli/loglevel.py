"""The ``--log-level`` option the top-level command and the service commands take. It lives apart
from :mod:`opsagent.cli.options` because ``opsagent --help`` reads it, and must not import the
engine to do so."""

from __future__ import annotations

from typing import Annotated

import typer

LogLevelOpt = Annotated[str, typer.Option("--log-level", metavar="LEVEL", help="debug, info, warning, error")]


def log_level_ok(level: str) -> None:
    if level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        from opsagent.cli.common import fail  # the console and settings only when there is something to say

        fail(f"unknown log level {level!r}")
