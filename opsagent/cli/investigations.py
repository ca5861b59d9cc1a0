"""``opsagent investigations list|show ID|schema``: the investigations the store holds (each
``investigate`` with lessons on records one), their reports, and the JSON report's schema."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from opsagent.cli.common import ExitCode, deliver, fail, out, store, wide, writable
from opsagent.cli.investigate import emit, exit_code
from opsagent.cli.options import JsonOpt, MarkdownOpt
from opsagent.report import schema_text, when
from opsagent.store import StoreError

investigations_app = typer.Typer(help="Past investigations: list, show, schema.", no_args_is_help=True)


@investigations_app.command(name="list")
def investigations_list(
    limit: Annotated[int, typer.Option("--limit", metavar="N", min=1, help="at most this many")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Recorded investigations, most recent first: the id `show` and `feedback` take, when, how it
    ended, the root cause, the engineer's feedback."""
    with store() as memory:
        found = memory.investigations(limit=limit)
    if as_json:
        sys.stdout.write(json.dumps([r.model_dump(mode="json") for r in found], indent=2) + "\n")
        return
    if not found:
        out.print("no investigations recorded yet (investigate with lessons on records one)")
        return
    table = Table(title=f"{len(found)} investigation(s)")
    for col in ("incident", "recorded", "status", "root cause", "feedback", "title"):
        table.add_column(col, overflow="fold")
    for r in found:
        cause = f"{r.root_kind} on {r.root_component}" if r.root_component else "-"
        feedback = (r.feedback or "-") + (f" ({r.feedback_root_cause})" if r.feedback_root_cause else "")
        cells = (r.incident_id, when(r.created_at), r.status, cause, feedback, r.title or "")
        table.add_row(*(Text(c) for c in cells))
    wide().print(table)


@investigations_app.command(name="show")
def investigations_show(
    incident_id: Annotated[str, typer.Argument(metavar="ID", help="as `opsagent investigations list` shows")],
    as_json: JsonOpt = False,
    markdown: MarkdownOpt = None,
) -> None:
    """One recorded investigation's report, as `investigate` printed it (exit 3 if it was inconclusive)."""
    if markdown is not None:
        writable(markdown, "--markdown")
    with store() as memory:
        try:
            report = memory.report(incident_id)
        except StoreError as exc:
            fail(str(exc))
    written = emit(report, as_json=as_json, markdown=markdown)
    raise typer.Exit(exit_code(report) if written else ExitCode.INTERNAL)


@investigations_app.command(name="schema")
def investigations_schema(
    to: Annotated[Path | None, typer.Option("--out", metavar="FILE", help="write it here, not to stdout")] = None,
) -> None:
    """The JSON Schema of the JSON report (`investigate --json`, `investigations show --json`)."""
    deliver(schema_text(), to, "--out")


def register(app: typer.Typer) -> None:
    app.add_typer(investigations_app, name="investigations")
