"""``opsagent fixtures validate|schema`` (recorded incidents) and ``opsagent playbooks check``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from opsagent.cli.common import ExitCode, err, fail, out, settings
from opsagent.cli.options import PlaybooksOpt
from opsagent.errors import Problem, UserError
from opsagent.fixtures import validate, write_json_schemas
from opsagent.plan import load_default_playbooks

fixtures_app = typer.Typer(help="Recorded incidents: validate, schema.", no_args_is_help=True)
playbooks_app = typer.Typer(help="Playbooks: check.", no_args_is_help=True)


@fixtures_app.command(name="validate")
def fixtures_validate(
    paths: Annotated[
        list[Path], typer.Argument(help="recorded incident directories (or a parent directory)", metavar="DIR...")
    ],
) -> None:
    """Check recorded incidents against the format; name the file, line and field of each error
    (exit 2 when any does not validate)."""
    problems: list[Problem] = []
    checked = 0
    for path in paths:
        targets = (
            [path]
            if (path / "incident.yaml").exists() or not path.is_dir()
            else [p for p in sorted(path.iterdir()) if p.is_dir()]
        )
        for target in targets or [path]:
            checked += 1
            problems.extend(validate(target))
    for p in problems:
        err.print(str(p), soft_wrap=True)
    if problems:
        err.print(f"{len(problems)} problem(s) in {checked} incident(s)")
        raise typer.Exit(ExitCode.BAD_INPUT)
    out.print(f"{checked} incident(s) valid")


@fixtures_app.command(name="schema")
def fixtures_schema(
    to: Annotated[Path, typer.Option("--out", metavar="DIR", help="directory for the JSON Schema files")] = Path(
        "fixtures/schema"
    ),
) -> None:
    """Write the JSON Schema of every file of the recorded-incident format."""
    try:
        written = write_json_schemas(to)
    except OSError as exc:
        fail(f"--out {to}: {exc}")
    for path in written:
        out.print(str(path))


@playbooks_app.command(name="check")
def playbooks_check(directory: PlaybooksOpt = None) -> None:
    """Validate playbooks; name the file and field of each error."""
    try:
        books = load_default_playbooks(directory or settings().playbooks_dir)
    except UserError as exc:
        fail(str(exc))
    where = Path(books[0].source_file or ".").parent if books else directory
    names = ", ".join(sorted(b.id for b in books))
    out.print(f"{len(books)} playbook(s) valid in {where}: {names}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.add_typer(fixtures_app, name="fixtures")
    app.add_typer(playbooks_app, name="playbooks")
