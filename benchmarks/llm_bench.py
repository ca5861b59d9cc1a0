"""The LLM reasoner over the recorded incidents, with the scripted model that ships in the package.

    python benchmarks/llm_bench.py [fixtures/incidents] [--token-budget N] [--modes tools,text]

The model is ``opsagent.llm.follow_hints`` behind the real HTTP client (an httpx MockTransport):
it proposes the playbooks' candidates, makes the listed checks, cites every observation and writes
the lesson the refutation suggests. So the figures measure the machinery — model calls, prompt and
completion tokens per investigation, whether every investigation stays inside its token budget —
not a model's judgement. Per strategy (hybrid, react) and act format (native tool calls, text).

Budget adherence: ``model <= budget`` counts investigations whose model tokens (prompt + completion,
as the server reports them) stayed inside the budget; ``meter <= budget`` those whose whole meter
(triage and observations, plus the model) did; ``max meter`` is the largest meter as a share of the
budget. The loop checks the budget between steps, so an observation may overrun it by its own size.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from opsagent.llm import ChatClient, FunctionModel, LLMReasoner, follow_hints  # noqa: E402
from opsagent.logconfig import configure  # noqa: E402
from opsagent.loop import Budget  # noqa: E402
from opsagent.pipeline import investigate_fixture  # noqa: E402
from opsagent.plan import load_default_playbooks  # noqa: E402
from opsagent.scoreboard import IncidentScore, fixture_dirs, score  # noqa: E402
from opsagent.settings import LLMSettings  # noqa: E402


@dataclass
class Row:
    strategy: str
    mode: str
    scores: list[IncidentScore] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    prompt: list[int] = field(default_factory=list)
    completion: list[int] = field(default_factory=list)
    meter: list[int] = field(default_factory=list)
    fallbacks: int = 0
    budget_stops: int = 0

    def mean(self, values: list[int]) -> float:
        return sum(values) / len(values) if values else 0.0


async def run(directory: Path, budget: Budget, modes: list[str]) -> list[Row]:
    books = load_default_playbooks()
    rows = []
    for strategy in ("hybrid", "react"):
        for mode in modes:
            row = Row(strategy, mode)
            for path in fixture_dirs(directory):
                settings = LLMSettings(model="follow-hints", mode=mode)  # type: ignore[arg-type]
                client = ChatClient.from_settings(settings, transport=FunctionModel(follow_hints).transport())
                reasoner = LLMReasoner(client=client, playbooks=books, settings=settings)
                report, truth = await investigate_fixture(
                    path, reasoner=reasoner, strategy_name=strategy, budget=budget
                )
                if report.llm is None or truth is None:
                    raise SystemExit(f"{path}: no model transcript or no truth to score against")
                row.scores.append(score(path.name, report, truth))
                row.calls.append(report.llm.usage.calls)
                row.prompt.append(report.llm.usage.prompt_tokens)
                row.completion.append(report.llm.usage.completion_tokens)
                row.meter.append(report.cost.tokens)
                row.fallbacks += report.llm.fallbacks
                row.budget_stops += report.budget_exhausted is not None
            rows.append(row)
    return rows


def table(rows: list[Row], budget: Budget) -> str:
    header = (
        f"{'strategy':<8} {'act':<5} {'AC@1':>5} {'verdict':>7} {'calls':>6} {'prompt':>7} {'compl.':>6} "
        f"{'meter':>6} {'model<=budget':>13} {'meter<=budget':>13} {'max meter':>9} {'stops':>5} {'fallb.':>6}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        n = len(r.scores)
        ac1 = sum(s.hit1 for s in r.scores) / n
        verdict = sum(s.verdict_ok for s in r.scores) / n
        model_ok = sum(p + c <= budget.token_budget for p, c in zip(r.prompt, r.completion, strict=True))
        meter_ok = sum(m <= budget.token_budget for m in r.meter)
        lines.append(
            f"{r.strategy:<8} {r.mode:<5} {ac1:>5.3f} {verdict:>7.3f} {r.mean(r.calls):>6.1f} {r.mean(r.prompt):>7.0f} "
            f"{r.mean(r.completion):>6.0f} {r.mean(r.meter):>6.0f} {f'{model_ok}/{n}':>13} {f'{meter_ok}/{n}':>13} "
            f"{max(r.meter) / budget.token_budget:>9.2f} {r.budget_stops:>5} {r.fallbacks:>6}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", nargs="?", type=Path, default=ROOT / "fixtures" / "incidents")
    parser.add_argument("--token-budget", type=int, default=Budget().token_budget)
    parser.add_argument("--modes", default="tools,text", help="act formats: tools, text or both")
    args = parser.parse_args()
    configure(level="error")
    budget = Budget(token_budget=args.token_budget)
    started = time.perf_counter()
    rows = asyncio.run(run(args.directory, budget, args.modes.split(",")))
    print(table(rows, budget))
    print(
        f"\n{len(rows[0].scores)} incidents from {args.directory}, token budget {budget.token_budget}, "
        f"scripted model follow_hints; means per investigation; {time.perf_counter() - started:.0f} s, "
        f"{time.strftime('%Y-%m-%d')}"
    )


if __name__ == "__main__":
    main()
