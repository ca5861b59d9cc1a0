"""``opsagent replay``: recorded incidents replayed against their truth, as a scoreboard."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from opsagent.cli.common import fail, note, run, settings, warn, wide
from opsagent.cli.investigate import lessons_or_warn
from opsagent.cli.options import JsonOpt, LessonsOpt, PlaybooksOpt, StrategyOpt
from opsagent.errors import UserError
from opsagent.fixtures import tag_filter
from opsagent.plan import Planner
from opsagent.scoreboard import IncidentScore, Scoreboard, by_start, replay, tagged_dirs
from opsagent.store import StoreError


def scoreboard_table(board: Scoreboard) -> Table:
    t = Table(title=f"replay · strategy {board.strategy}")
    columns = (
        "incident",
        "truth",
        "top 3 (component/kind)",
        "status",
        "hit@1",
        "hit@3",
        "change",
        "steps",
        "calls",
        "tokens",
    )
    for col in (*columns, "wall ms"):
        t.add_column(col, overflow="fold")
    for s in board.scores:
        cells = (
            s.slug,
            f"{s.truth_service}/{s.truth_kind}",
            "\n".join(f"{c}/{k}" for c, k in s.top),
            s.status + ("" if s.verdict_ok else " ✗"),
            "✓" if s.hit1 else "·",
            "✓" if s.hit3 else "·",
            ("-" if not s.truth_changes else f"#{s.change_rank}" if s.change_rank else "✗"),
            str(s.steps),
            str(s.tool_calls),
            str(s.tokens),
            f"{s.wall_ms:.0f}",
        )
        t.add_row(*(Text(c) for c in cells))
    return t


def summary_line(board: Scoreboard) -> str:
    c1, c3 = board.change_at(1), board.change_at(3)
    changes = (
        f"change@1 {c1:.3f}  change@3 {c3:.3f} ({len(board.with_changes)})  "
        if c1 is not None and c3 is not None
        else ""
    )
    storms = board.storms
    grouped = f"  alert storms grouped right {sum(bool(s.storm_ok) for s in storms)}/{len(storms)}" if storms else ""
    return (
        f"AC@1 {board.ac(1):.3f}  AC@3 {board.ac(3):.3f}  Avg@5 {board.avg5:.3f}  {changes}"
        f"kind accuracy {board.kind_accuracy:.3f}  verdicts right {board.verdict_accuracy:.3f}  "
        f"({len(board.scores)} incidents){grouped}"
    )


def replay_cmd(
    directory: Annotated[
        Path, typer.Argument(help="a directory of recorded incidents (or one incident)", metavar="DIR")
    ] = Path("fixtures/incidents"),
    strategy_name: StrategyOpt = "hybrid",
    as_json: JsonOpt = False,
    playbooks: PlaybooksOpt = None,
    use_lessons: LessonsOpt = False,
    learn: Annotated[
        bool,
        typer.Option(
            "--learn",
            metavar="",
            help="store the lessons each incident teaches (vs its truth), in the order the incidents fired",
        ),
    ] = False,
    tags: Annotated[
        list[str] | None,
        typer.Option(
            "--tag",
            metavar="KEY=VALUE",
            help="only incidents tagged so (fault=KIND, sources=traces, system=NAME); repeat: all must hold",
        ),
    ] = None,
) -> None:
    """Replay recorded incidents and print a scoreboard (AC@1, AC@3, Avg@5, kind accuracy)."""
    try:
        dirs = tagged_dirs(directory, tag_filter(tags or []))
        if learn:
            # A team meets its incidents in the order they fired: each learns only from those before it.
            dirs = by_start(dirs)
    except UserError as exc:
        fail(str(exc))
    config = settings()
    memory, _ = lessons_or_warn(config) if learn or use_lessons else (None, [])

    async def go() -> Scoreboard:
        planner = Planner.from_settings(config, playbooks=playbooks, strategy=strategy_name)
        return await replay(
            directory,
            planner=planner,
            memory=memory,
            use_lessons=use_lessons,
            learn=learn,
            dirs=dirs,
        )

    board = run(go)
    if learn and memory is not None:
        try:
            note(f"{len(memory.lessons())} lesson(s) in {memory.where}")
        except StoreError as exc:
            warn(str(exc))
    if as_json:
        payload: dict[str, Any] = {
            "strategy": board.strategy,
            "ac1": board.ac(1),
            "ac3": board.ac(3),
            "avg5": board.avg5,
            "kind_accuracy": board.kind_accuracy,
            "verdict_accuracy": board.verdict_accuracy,
            "change_at_1": board.change_at(1),
            "change_at_3": board.change_at(3),
            "with_changes": len(board.with_changes),
            "incidents": [IncidentScore.model_dump(s) for s in board.scores],
        }
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
        return
    console = wide()
    console.print(scoreboard_table(board))
    console.print(summary_line(board))


def register(app: typer.Typer) -> None:
    app.command(name="replay")(replay_cmd)
