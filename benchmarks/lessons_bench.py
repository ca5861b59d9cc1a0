"""What lessons are worth: repeat incidents, generalisation, and reflection against naive retries.

    python benchmarks/lessons_bench.py [fixtures/incidents] [--heldout DIR] [--attempts K]

1. Repeat incident: the order-service incident replayed twice with lessons on (steps, tool calls,
   the second run's first action against the lesson's next action).
2. Generalisation: lessons learned on one half of a family, used on the other, against lessons off.
   Families here are (a) the corpus split in two halves that swap roles, and (b) the same scenarios
   regenerated with other noise (``--heldout``, made by ``fixtures/generate.py --seed-offset N``;
   generated into a temporary directory when not given).
3. Reflection against naive retries, for the ``react`` strategy (the hybrid one is already right
   on every incident, so nothing is left to learn there): success after K attempts, by the
   independent-retry formula 1 - (1 - p)^K, by actually retrying (the engine is deterministic, so a
   plain retry repeats itself), and by retrying with the lessons the failed attempts taught.
Lessons live in memory here: nothing is written to the user's store.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from opsagent.lessons import InMemoryLessons, concrete  # noqa: E402
from opsagent.logconfig import configure  # noqa: E402
from opsagent.pipeline import investigate_fixture, load_default_playbooks  # noqa: E402
from opsagent.scoreboard import Scoreboard, fixture_dirs, replay  # noqa: E402

ORDER = "order-service-threadpool-config"


def row(label: str, board: Scoreboard) -> str:
    return (
        f"{label:<34} {board.ac(1):>6.3f} {board.ac(3):>6.3f} {board.verdict_accuracy:>7.3f} "
        f"{board.mean('tool_calls'):>6.1f} {board.mean('steps'):>6.1f}"
    )


HEADER = f"{'':<34} {'AC@1':>6} {'AC@3':>6} {'verdict':>7} {'calls':>6} {'steps':>6}"


async def repeat(corpus: Path) -> None:
    incident = corpus / ORDER
    memory = InMemoryLessons()
    first = (await replay(incident, memory=memory, use_lessons=True, learn=True)).scores[0]
    report, _ = await investigate_fixture(incident, lessons=memory.lessons())
    second = (await replay(incident, memory=memory, use_lessons=True)).scores[0]
    lesson = memory.lessons()[0]
    first_action = report.results[0].steps[0].action if report.results and report.results[0].steps else None
    print("1. Repeat incident (order-service, hybrid, lessons on)")
    print(f"   run 1: {first.status} {first.top[0]}  steps {first.steps}  tool calls {first.tool_calls}")
    print(f"   run 2: {second.status} {second.top[0]}  steps {second.steps}  tool calls {second.tool_calls}")
    print(
        f"   lesson {lesson.id}: {lesson.refuted_kind} refuted under {', '.join(lesson.trigger.signals)};"
        f" next action {lesson.next_action.key()}"
    )
    expected = concrete(lesson.next_action, "order-service")
    print(
        f"   run 2 first action: {first_action.key() if first_action else None}"
        f" ({'the lesson' + chr(39) + 's next action' if first_action == expected else 'NOT the lesson'})"
    )
    for use in report.lessons_used:
        print(f"   {use.lesson_id} changed: {'; '.join(use.effects)}")


async def generalisation(corpus: Path, heldout: Path, strategy: str) -> None:
    books = load_default_playbooks()
    dirs = fixture_dirs(corpus)
    halves = (dirs[0::2], dirs[1::2])
    print(f"\n2. Generalisation ({strategy})\n{HEADER}")
    for name, (learn_on, test_on) in (
        ("(a) corpus half A -> half B", halves),
        ("(a) corpus half B -> half A", halves[::-1]),
    ):
        memory = InMemoryLessons()
        await replay(corpus, playbooks=books, strategy_name=strategy, memory=memory, learn=True, dirs=learn_on)
        off = await replay(corpus, playbooks=books, strategy_name=strategy, dirs=test_on)
        on = await replay(
            corpus, playbooks=books, strategy_name=strategy, memory=memory, use_lessons=True, dirs=test_on
        )
        print(row(f"{name}, lessons off", off))
        print(row(f"{name}, lessons on ({len(memory.lessons())})", on))
    memory = InMemoryLessons()
    await replay(corpus, playbooks=books, strategy_name=strategy, memory=memory, learn=True)
    off = await replay(heldout, playbooks=books, strategy_name=strategy)
    on = await replay(heldout, playbooks=books, strategy_name=strategy, memory=memory, use_lessons=True)
    print(row("(b) corpus -> other noise, off", off))
    print(row(f"(b) corpus -> other noise, on ({len(memory.lessons())})", on))


async def retries(corpus: Path, attempts: int) -> None:
    books = load_default_playbooks()
    dirs = fixture_dirs(corpus)
    first = await replay(corpus, playbooks=books, strategy_name="react")
    p = first.verdict_accuracy
    solved_plain = {s.slug for s in first.scores if s.verdict_ok}
    solved_lessons: set[str] = set()
    per_attempt = []
    for directory in dirs:  # each incident gets its own memory: only its own failures teach it
        memory = InMemoryLessons()
        for k in range(1, attempts + 1):
            board = await replay(
                corpus,
                playbooks=books,
                strategy_name="react",
                memory=memory,
                use_lessons=True,
                learn=True,
                dirs=[directory],
            )
            if board.scores[0].verdict_ok:
                solved_lessons.add(directory.name)
                per_attempt.append(k)
                break
    n = len(dirs)
    print(f"\n3. Reflection against naive retries (react, verdict right, {n} incidents)")
    print(f"{'attempts K':>10} {'1-(1-p)^K':>10} {'plain retry':>12} {'with lessons':>13}")
    for k in range(1, attempts + 1):
        formula = 1 - (1 - p) ** k
        with_lessons = sum(1 for a in per_attempt if a <= k) / n
        print(f"{k:>10} {formula:>10.3f} {len(solved_plain) / n:>12.3f} {with_lessons:>13.3f}")


def heldout_dir(given: Path | None) -> Path:
    if given is not None:
        return given
    out = Path(tempfile.mkdtemp(prefix="opsagent-heldout-"))
    subprocess.run(
        [sys.executable, str(ROOT / "fixtures" / "generate.py"), "--out", str(out), "--seed-offset", "100"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return out


async def main(corpus: Path, heldout: Path | None, attempts: int) -> None:
    configure(level="error")
    await repeat(corpus)
    held = heldout_dir(heldout)
    for strategy in ("hybrid", "react"):
        await generalisation(corpus, held, strategy)
    await retries(corpus, attempts)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="?", type=Path, default=ROOT / "fixtures" / "incidents")
    parser.add_argument("--heldout", type=Path, default=None)
    parser.add_argument("--attempts", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.corpus, args.heldout, args.attempts))
