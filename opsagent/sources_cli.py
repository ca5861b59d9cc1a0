"""The live-source commands, ``opsagent doctor`` and ``opsagent record``, added to the CLI by
:func:`register`. A bad configuration or alert prints a clear message and exits 2."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from opsagent.doctor import Health, diagnose
from opsagent.errors import Problem
from opsagent.models import Report
from opsagent.settings import Settings

console = Console()
err = Console(stderr=True)


def _settings() -> Settings:
    # The CLI's own (a bad config file exits 2 with its message); imported when the CLI runs.
    from opsagent.cli import _settings as settings_or_exit

    return settings_or_exit()


def health_table(rows: list[Health]) -> Table:
    table = Table(title="live sources")
    for col in ("source", "target", "reachable", "version", "latency", "problem", "how to fix"):
        table.add_column(col, overflow="fold")
    for h in rows:
        table.add_row(
            f"{h.kind}:{h.name}",
            h.target,
            "[green]yes[/]" if h.reachable else "[red]no[/]",
            escape(h.version or "?"),
            f"{h.latency_ms:.0f} ms" if h.latency_ms is not None else "-",
            escape("\n".join(h.problems)) or "[green]ok[/]",
            escape("\n".join(h.fixes)),
        )
    return table


def doctor() -> None:
    """Check every configured live source: reachable, version, latency, and what to fix."""
    settings = _settings()
    if settings.sources.empty():
        err.print(
            "no live sources configured: add a `sources:` section to the config file "
            "(see README, Live sources); alerts are investigated with no source until then",
            soft_wrap=True,
        )
        raise typer.Exit(1)
    rows = asyncio.run(diagnose(settings.sources))
    wide = console if console.is_terminal else Console(width=200)
    wide.print(health_table(rows))
    bad = [h for h in rows if not h.ok]
    if bad:
        err.print(f"{len(bad)} of {len(rows)} source(s) need attention")
        raise typer.Exit(1)
    console.print(f"{len(rows)} source(s) ok")


def record(
    alert_file: Annotated[Path, typer.Argument(help="an Alertmanager alert (or webhook payload), YAML or JSON")],
    out: Annotated[Path, typer.Option("--out", help="directory to write the recorded incident into")],
    playbooks: Annotated[Path | None, typer.Option("--playbooks", help="playbook directory")] = None,
    k: Annotated[int, typer.Option("--k", help="hypotheses proposed per round")] = 5,
    beam: Annotated[int, typer.Option("--beam", help="hypotheses verified at once")] = 2,
    max_steps: Annotated[int, typer.Option("--max-steps", help="steps per hypothesis")] = 6,
    token_budget: Annotated[int, typer.Option("--token-budget", help="tokens per investigation")] = 40_000,
    wall_s: Annotated[float, typer.Option("--wall-s", help="wall-clock cap, seconds")] = 120.0,
    timeout_s: Annotated[float, typer.Option("--timeout", help="per tool call, seconds")] = 10.0,
) -> None:
    """Investigate an alert against the live sources and write what they returned as a recorded
    incident (secrets redacted) that `opsagent fixtures validate` accepts."""
    # The alert loader and runner are the CLI's own; imported here, when the CLI is loaded.
    from opsagent.cli import _budget, _load_alert, _run
    from opsagent.pipeline import load_default_playbooks
    from opsagent.record import record_incident

    budget = _budget(k, beam, max_steps, token_budget, wall_s, timeout_s)
    settings = _settings()
    if not alert_file.exists():
        err.print(f"[bold red]error:[/] {alert_file}: no such file")
        raise typer.Exit(2)
    if out.exists() and not out.is_dir():
        err.print(f"[bold red]error:[/] --out {out} is a file: record into a new directory")
        raise typer.Exit(2)
    if out.exists() and any(out.iterdir()):
        err.print(f"[bold red]error:[/] {out} is not empty: record into a new directory")
        raise typer.Exit(2)
    try:  # before the investigation: what it reads must have somewhere to go
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        err.print(f"[bold red]error:[/] --out {out}: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    if settings.sources.empty():
        err.print("[yellow]warning:[/] no live sources configured: the recording will hold only the alert")

    async def go() -> tuple[Report, list[Problem]]:
        alert = _load_alert(alert_file)
        report, problems = await record_incident(
            alert,
            out=out,
            sources_config=settings.sources,
            signals=settings.signals,
            playbooks=load_default_playbooks(playbooks),
            budget=budget,
            now=datetime.now(UTC),
        )
        return report, problems

    report, problems = _run(go)
    for p in problems:
        err.print(str(p), markup=False, soft_wrap=True)
    if problems:
        err.print(f"[bold red]error:[/] the recording in {out} does not validate ({len(problems)} problem(s))")
        raise typer.Exit(1)
    for source, why in report.unreadable_sources.items():
        err.print(f"[yellow]not read:[/] {escape(source)}: {escape(why)}", soft_wrap=True)
    files = ", ".join(sorted(p.name for p in out.iterdir()))
    console.print(f"recorded {out} ({files}); replay it with `opsagent investigate {out}`")


def register(app: typer.Typer) -> None:
    """Add ``doctor`` and ``record`` to the ``opsagent`` command."""
    app.command(name="doctor")(doctor)
    app.command(name="record")(record)
