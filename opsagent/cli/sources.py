"""The live-source commands: ``opsagent doctor`` (can every configured source be read, and does
it hold what an investigation asks of it?) and ``opsagent record`` (a live incident captured as a
recorded incident)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from adapters.config import live_catalog
from opsagent.cli.common import ExitCode, err, fail, out, run, settings, warn, wide
from opsagent.cli.investigate import load_alert
from opsagent.cli.options import (
    BEAM,
    MAX_STEPS,
    TIMEOUT_S,
    TOKEN_BUDGET,
    WALL_S,
    BeamOpt,
    K,
    KOpt,
    MaxStepsOpt,
    PlaybooksOpt,
    TimeoutOpt,
    TokenBudgetOpt,
    WallOpt,
    budget,
)
from opsagent.doctor import Health, diagnose, investigated_range
from opsagent.errors import Problem, UserError
from opsagent.models import Report
from opsagent.plan import load_default_playbooks
from opsagent.record import record_incident
from opsagent.triggers import moment


def health_table(rows: list[Health]) -> Table:
    table = Table(title="live sources")
    for col in ("source", "target", "reachable", "version", "latency", "problem", "how to fix"):
        table.add_column(col, overflow="fold")
    for h in rows:
        table.add_row(
            Text(f"{h.kind}:{h.name}"),
            Text(h.target),
            Text("yes", style="green") if h.reachable else Text("no", style="red"),
            Text((h.version or "?") + (f"\nreads {', '.join(h.readable)}" if h.readable else "")),
            Text(f"{h.latency_ms:.0f} ms" if h.latency_ms is not None else "-"),
            Text("\n".join(h.problems)) if h.problems else Text("ok", style="green"),
            Text("\n".join(h.fixes)),
        )
    return table


def signals_table(rows: list[Health]) -> Table | None:
    checked = [(h, s) for h in rows for s in h.signals]
    if not checked:
        return None
    table = Table(title="core signals: does each resolve for at least one service?")
    for col in ("source", "signal", "resolves", "series", "query"):
        table.add_column(col, overflow="fold")
    for h, s in checked:
        table.add_row(
            Text(f"{h.kind}:{h.name}"),
            Text(s.signal),
            Text("yes", style="green") if s.resolves else Text("no", style="red"),
            Text(str(s.series)),
            Text(s.query),
        )
    return table


def doctor(
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            metavar="TIME",
            help="check the range an investigation with its onset then reads (2026-03-17T14:02:00Z, 14:02 UTC); "
            "default: the last 90 minutes",
        ),
    ] = None,
) -> None:
    """Check every configured live source: reachable, version, latency, what it holds over the
    range an investigation reads, whether the core signals resolve, and what to fix (exit 3 when any
    needs attention)."""
    config = settings()
    if config.sources.empty():
        fail(
            "no live sources configured: add a `sources:` section to the config file "
            "(see docs/sources.md); alerts are investigated with no source until then"
        )
    now = datetime.now(UTC)
    try:
        span = investigated_range(moment(at, now=now) if at else None, now=now)
    except UserError as exc:
        fail(str(exc))
    out.print(f"checking {span.start:%Y-%m-%d %H:%M} to {span.end:%Y-%m-%d %H:%M} UTC", soft_wrap=True)
    rows = asyncio.run(diagnose(config.sources, span=span, catalog=live_catalog(config.signals)))
    console = wide()
    console.print(health_table(rows))
    signals = signals_table(rows)
    if signals is not None:
        console.print(signals)
    bad = [h for h in rows if not h.ok]
    if bad:
        err.print(f"{len(bad)} of {len(rows)} source(s) need attention")
        raise typer.Exit(ExitCode.INCONCLUSIVE)
    out.print(f"{len(rows)} source(s) ok")


def record(
    alert_file: Annotated[
        Path, typer.Argument(help="an Alertmanager alert (or webhook payload), YAML or JSON", metavar="ALERT_FILE")
    ],
    to: Annotated[Path, typer.Option("--out", metavar="DIR", help="directory to write the recorded incident into")],
    playbooks: PlaybooksOpt = None,
    k: KOpt = K,
    beam: BeamOpt = BEAM,
    max_steps: MaxStepsOpt = MAX_STEPS,
    token_budget: TokenBudgetOpt = TOKEN_BUDGET,
    wall_s: WallOpt = WALL_S,
    timeout_s: TimeoutOpt = TIMEOUT_S,
) -> None:
    """Investigate an alert against the live sources and write what they returned as a recorded
    incident (secrets redacted) that `opsagent fixtures validate` accepts."""
    asked = budget(k=k, beam=beam, max_steps=max_steps, token_budget=token_budget, wall_s=wall_s, timeout_s=timeout_s)
    config = settings()
    if not alert_file.exists():
        fail(f"{alert_file}: no such file")
    if to.exists() and not to.is_dir():
        fail(f"--out {to} is a file: record into a new directory")
    if to.exists() and any(to.iterdir()):
        fail(f"{to} is not empty: record into a new directory")
    try:  # before the investigation: what it reads must have somewhere to go
        to.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"--out {to}: {exc}")
    if config.sources.empty():
        warn("no live sources configured: the recording will hold only the alert")

    async def go() -> tuple[Report, list[Problem]]:
        alert = load_alert(alert_file)
        return await record_incident(
            alert,
            out=to,
            sources_config=config.sources,
            signals=config.signals,
            playbooks=load_default_playbooks(playbooks or config.playbooks_dir),
            budget=asked,
            now=datetime.now(UTC),
        )

    report, problems = run(go)
    for p in problems:
        err.print(str(p), soft_wrap=True)
    if problems:
        fail(f"the recording in {to} does not validate ({len(problems)} problem(s))", ExitCode.INTERNAL)
    for source, why in report.unreadable_sources.items():
        err.print(Text.assemble(("not read: ", "yellow"), f"{source}: {why}"), soft_wrap=True)
    files = ", ".join(sorted(p.name for p in to.iterdir()))
    out.print(f"recorded {to} ({files}); replay it with `opsagent investigate {to}`", soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command(name="doctor")(doctor)
    app.command(name="record")(record)
