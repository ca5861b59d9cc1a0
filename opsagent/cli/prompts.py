"""``opsagent prompts REPORT.json``: what an LLM investigation sent and received, call by call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console

from opsagent.cli.common import fail
from opsagent.llm.cli import print_prompts
from opsagent.models import Report


def prompts_cmd(
    report_file: Annotated[
        Path, typer.Argument(metavar="REPORT_JSON", help="a JSON report (opsagent investigate --json)")
    ],
    hypothesis: Annotated[
        str | None, typer.Option("--hypothesis", metavar="ID", help="only this hypothesis id")
    ] = None,
    purpose: Annotated[
        str | None, typer.Option("--purpose", metavar="WHAT", help="propose, repair, act or reflect")
    ] = None,
    full: Annotated[
        bool, typer.Option("--full", metavar="", help="whole requests, not only what each turn added")
    ] = False,
) -> None:
    """Show exactly what the model was told and what it answered, call by call."""
    try:
        report = Report.model_validate(json.loads(report_file.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as exc:
        fail(f"{report_file}: not a JSON report: {str(exc)[:300]}")
    # the exchanges are drawn as rich panels; their text reaches them as Text, never as markup
    print_prompts(report, Console(), hypothesis=hypothesis, purpose=purpose, full=full)


def register(app: typer.Typer) -> None:
    app.command(name="prompts")(prompts_cmd)
