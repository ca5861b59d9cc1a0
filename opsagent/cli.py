"""The ``opsagent`` command line (typer + rich).

User errors (bad fixture, alert, playbook, option) print a clear message and exit 2; they never
show a traceback.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from opsagent.catalog import default_catalog
from opsagent.errors import AlertError, Problem, UserError
from opsagent.fixtures import validate, write_json_schemas
from opsagent.logconfig import configure
from opsagent.loop import Budget
from opsagent.models import Alert, Report
from opsagent.pipeline import investigate, investigate_fixture, load_default_playbooks
from opsagent.reasoner import PlaybookReasoner
from opsagent.report import render, to_json, to_markdown
from opsagent.scoreboard import IncidentScore, Scoreboard, replay
from opsagent.strategies import STRATEGIES, strategy
from opsagent.tools import Sources

app = typer.Typer(
    help="Incident root-cause analysis for on-call engineers. Read-only.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
fixtures_app = typer.Typer(help="Recorded incidents: validate, schema.", no_args_is_help=True)
playbooks_app = typer.Typer(help="Playbooks: check.", no_args_is_help=True)
app.add_typer(fixtures_app, name="fixtures")
app.add_typer(playbooks_app, name="playbooks")

console = Console()
err = Console(stderr=True)
T = TypeVar("T")


@app.callback()
def main(
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning, error")] = "warning",
) -> None:
    if log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        err.print(f"[bold red]error:[/] unknown log level {log_level!r}")
        raise typer.Exit(2)
    configure(level=log_level)


def _run(coro_fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    try:
        return asyncio.run(coro_fn())
    except UserError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


StrategyOpt = Annotated[str, typer.Option("--strategy", "-s", help=f"one of: {', '.join(STRATEGIES)}")]
PlaybooksOpt = Annotated[Path | None, typer.Option("--playbooks", help="playbook directory")]


def _budget(k: int, beam: int, max_steps: int, token_budget: int, wall_s: float, timeout_s: float) -> Budget:
    if min(k, beam, max_steps, token_budget) < 1 or wall_s <= 0 or timeout_s <= 0:
        err.print(
            "[bold red]error:[/] --k, --beam, --max-steps, --token-budget, --wall-s and --timeout must be positive"
        )
        raise typer.Exit(2)
    return Budget(k=k, beam=beam, max_steps=max_steps, token_budget=token_budget, wall_s=wall_s, timeout_s=timeout_s)


class LiveView:
    """Hypotheses and their progress, redrawn as the loop reports."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, str]] = {}
        self.live = Live(self._table(), console=err, refresh_per_second=8, transient=False)

    def _table(self) -> Table:
        t = Table(title="verifying hypotheses", expand=True)
        for col in ("hypothesis", "steps", "status", "last action"):
            t.add_column(col, overflow="fold")
        for hid, row in self.rows.items():
            t.add_row(hid, row.get("steps", "0"), row.get("status", "…"), row.get("action", ""))
        return t

    def __call__(self, event: str, fields: dict[str, Any]) -> None:
        row = self.rows.setdefault(str(fields.get("id")), {})
        if event == "step":
            row["steps"] = str(fields.get("steps"))
            row["action"] = str(fields.get("action"))
        elif event == "verdict":
            row["status"] = str(fields.get("status"))
        self.live.update(self._table())


def _load_alert(path: Path) -> Alert:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise AlertError([Problem(str(path), f"cannot read: {exc}")]) from exc
    if isinstance(raw, dict) and isinstance(raw.get("alerts"), list):  # a whole webhook payload
        if not raw["alerts"]:
            raise AlertError([Problem(str(path), "the payload holds no alerts", field="alerts")])
        raw = raw["alerts"][0]
    if isinstance(raw, dict) and "alert" in raw and "labels" not in raw:  # an incident.yaml
        raw = raw["alert"]
    try:
        return Alert.model_validate(raw)
    except ValidationError as exc:
        problems = [Problem(str(path), e["msg"], field=".".join(map(str, e["loc"])) or None) for e in exc.errors()]
        raise AlertError(problems) from exc


def _emit(report: Report, as_json: bool, markdown: Path | None) -> None:
    if markdown is not None:
        markdown.write_text(to_markdown(report), encoding="utf-8")
    if as_json:
        sys.stdout.write(to_json(report) + "\n")
    else:
        render(report, console)


@app.command(name="investigate")
def investigate_cmd(
    target: Annotated[Path, typer.Argument(help="a recorded incident directory, or an alert file (YAML/JSON)")],
    strategy_name: StrategyOpt = "hybrid",
    k: Annotated[int, typer.Option("--k", help="hypotheses proposed per round")] = 5,
    beam: Annotated[int, typer.Option("--beam", help="hypotheses verified at once")] = 2,
    max_steps: Annotated[int, typer.Option("--max-steps", help="steps per hypothesis")] = 6,
    token_budget: Annotated[int, typer.Option("--token-budget", help="tokens per investigation")] = 40_000,
    wall_s: Annotated[float, typer.Option("--wall-s", help="wall-clock cap, seconds")] = 60.0,
    timeout_s: Annotated[float, typer.Option("--timeout", help="per tool call, seconds")] = 3.0,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    markdown: Annotated[Path | None, typer.Option("--markdown", help="also write a Markdown report here")] = None,
    playbooks: PlaybooksOpt = None,
    live: Annotated[bool, typer.Option("--live/--no-live", help="show hypotheses as they are verified")] = True,
) -> None:
    """Investigate one incident and print the root cause, its evidence and what was ruled out."""
    budget = _budget(k, beam, max_steps, token_budget, wall_s, timeout_s)

    async def go() -> Report:
        strategy(strategy_name)  # fail fast on a bad name
        books = load_default_playbooks(playbooks)
        view = LiveView() if live and not as_json and err.is_terminal else None
        listener = view if view is not None else None
        if view is not None:
            view.live.start()
        try:
            if target.is_dir():
                report, _ = await investigate_fixture(
                    target, playbooks=books, strategy_name=strategy_name, budget=budget, listener=listener
                )
                return report
            alert = _load_alert(target)
            return await investigate(
                alert,
                sources=Sources(),
                catalog=default_catalog(),
                reasoner=PlaybookReasoner(books),
                strategy_name=strategy_name,
                budget=budget,
                listener=listener,
            )
        finally:
            if view is not None:
                view.live.stop()

    if not target.exists():
        err.print(f"[bold red]error:[/] {target}: no such file or directory")
        raise typer.Exit(2)
    _emit(_run(go), as_json, markdown)


def _scoreboard_table(board: Scoreboard) -> Table:
    t = Table(title=f"replay · strategy {board.strategy}")
    for col in (
        "incident",
        "truth",
        "top 3 (component/kind)",
        "status",
        "hit@1",
        "hit@3",
        "steps",
        "calls",
        "tokens",
        "wall ms",
    ):
        t.add_column(col, overflow="fold")
    for s in board.scores:
        t.add_row(
            s.slug,
            f"{s.truth_service}/{s.truth_kind}",
            "\n".join(f"{c}/{k}" for c, k in s.top),
            s.status + ("" if s.verdict_ok else " ✗"),
            "✓" if s.hit1 else "·",
            "✓" if s.hit3 else "·",
            str(s.steps),
            str(s.tool_calls),
            str(s.tokens),
            f"{s.wall_ms:.0f}",
        )
    return t


def summary_line(board: Scoreboard) -> str:
    return (
        f"AC@1 {board.ac(1):.3f}  AC@3 {board.ac(3):.3f}  Avg@5 {board.avg5:.3f}  "
        f"kind accuracy {board.kind_accuracy:.3f}  verdicts right {board.verdict_accuracy:.3f}  "
        f"({len(board.scores)} incidents)"
    )


@app.command(name="replay")
def replay_cmd(
    directory: Annotated[Path, typer.Argument(help="a directory of recorded incidents (or one incident)")] = Path(
        "fixtures/incidents"
    ),
    strategy_name: StrategyOpt = "hybrid",
    as_json: Annotated[bool, typer.Option("--json", help="print the scoreboard as JSON")] = False,
    playbooks: PlaybooksOpt = None,
) -> None:
    """Replay recorded incidents and print a scoreboard (AC@1, AC@3, Avg@5, kind accuracy)."""

    async def go() -> Scoreboard:
        strategy(strategy_name)
        books = load_default_playbooks(playbooks)
        return await replay(directory, strategy_name=strategy_name, playbooks=books)

    board = _run(go)
    if as_json:
        payload: dict[str, Any] = {
            "strategy": board.strategy,
            "ac1": board.ac(1),
            "ac3": board.ac(3),
            "avg5": board.avg5,
            "kind_accuracy": board.kind_accuracy,
            "verdict_accuracy": board.verdict_accuracy,
            "incidents": [IncidentScore.model_dump(s) for s in board.scores],
        }
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
        return
    wide = console if console.is_terminal else Console(width=200)
    wide.print(_scoreboard_table(board))
    wide.print(summary_line(board))


@fixtures_app.command(name="validate")
def fixtures_validate(
    paths: Annotated[list[Path], typer.Argument(help="recorded incident directories (or a parent directory)")],
) -> None:
    """Check recorded incidents against the format; name the file, line and field of each error."""
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
        err.print(str(p), highlight=False, markup=False, soft_wrap=True)
    if problems:
        err.print(f"{len(problems)} problem(s) in {checked} incident(s)")
        raise typer.Exit(1)
    console.print(f"{checked} incident(s) valid")


@fixtures_app.command(name="schema")
def fixtures_schema(
    out: Annotated[Path, typer.Option("--out", help="directory for the JSON Schema files")] = Path("fixtures/schema"),
) -> None:
    """Write the JSON Schema of every file of the recorded-incident format."""
    for path in write_json_schemas(out):
        console.print(str(path))


@playbooks_app.command(name="check")
def playbooks_check(directory: PlaybooksOpt = None) -> None:
    """Validate playbooks; name the file and field of each error."""
    try:
        books = load_default_playbooks(directory)
    except UserError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from None
    console.print(f"{len(books)} playbook(s) valid: {', '.join(sorted(b.id for b in books))}")


if __name__ == "__main__":
    app()
