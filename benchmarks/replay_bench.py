"""Replay the recorded-incident corpus under each strategy and print the comparison table.

    python benchmarks/replay_bench.py [fixtures/incidents] [--repeat N] [--tag KEY=VALUE ...]

Prints, per strategy: AC@1, AC@3, Avg@5, kind accuracy, verdicts right, mean tool calls, mean
estimated tokens, and p50 / max wall time per incident (playbook reasoner, no servers). Wall
times are the median over --repeat runs of each incident (the machines are noisy). ``--tag``
(repeatable, all must hold) replays a slice: ``--tag sources=traces``, ``--tag fault=config_change``,
``--tag system=payments``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from opsagent.fixtures import tag_filter  # noqa: E402
from opsagent.logconfig import configure  # noqa: E402
from opsagent.plan import load_default_playbooks  # noqa: E402
from opsagent.scoreboard import replay, tagged_dirs  # noqa: E402
from opsagent.strategies import STRATEGIES  # noqa: E402


async def main(directory: Path, repeat: int, tags: list[str]) -> None:
    configure(level="error")
    books = load_default_playbooks()
    dirs = tagged_dirs(directory, tag_filter(tags))
    rows = []
    for name in STRATEGIES:
        boards = [await replay(directory, strategy_name=name, playbooks=books, dirs=dirs) for _ in range(repeat)]
        board = boards[0]
        per_incident = [median(b.scores[i].wall_ms for b in boards) for i in range(len(board.scores))]
        rows.append((name, board, median(per_incident), max(per_incident)))
        misses = [s.slug for s in board.scores if not s.hit1]
        print(f"{name}: missed at top-1: {', '.join(misses) or 'none'}")
    print()
    header = (
        f"{'strategy':<8} {'AC@1':>6} {'AC@3':>6} {'Avg@5':>6} {'kind':>6} {'verdict':>7} "
        f"{'calls':>6} {'tokens':>7} {'p50 ms':>7} {'max ms':>7}"
    )
    print(header)
    print("-" * len(header))
    for name, board, p50, worst in rows:
        print(
            f"{name:<8} {board.ac(1):>6.3f} {board.ac(3):>6.3f} {board.avg5:>6.3f} {board.kind_accuracy:>6.3f} "
            f"{board.verdict_accuracy:>7.3f} {board.mean('tool_calls'):>6.1f} {board.mean('tokens'):>7.0f} "
            f"{p50:>7.0f} {worst:>7.0f}"
        )
    sliced = f" tagged {' '.join(tags)}" if tags else ""
    print(
        f"\n{len(rows[0][1].scores)} incidents from {directory}{sliced}, {repeat} run(s) each, "
        f"{time.strftime('%Y-%m-%d')}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", nargs="?", type=Path, default=ROOT / "fixtures" / "incidents")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="replay only this slice")
    args = parser.parse_args()
    asyncio.run(main(args.directory, args.repeat, args.tag))
