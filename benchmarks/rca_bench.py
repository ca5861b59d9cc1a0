"""Root-cause accuracy on every data set we have, under each strategy, in one table.

    python benchmarks/rca_bench.py [--shared ../shared/datasets] [--sets corpus,petshop,nezha-tt,...]
                                   [--strategies hybrid,react|all] [--no-llm] [--ablate] [--no-signals-table]

Sets: ``corpus`` (the recorded incidents in fixtures/incidents, written by this team), ``rollouts``
(those of them with two or more rollouts in flight), ``petshop``
(PetShop's 48 test issues, converted into a temporary directory), and the real incidents of
``rca-dev`` (``nezha-tt``, ``nezha-ob``, ``changerca``; see ../shared/datasets/README.md) and
``cloudopsbench`` (Kubernetes fault injections, ../shared/datasets/cloudopsbench-dev, with a table per
system and fault category: component AC@1/AC@3, kind, component+kind @1, verdicts, how many confirmed
verdicts name the true component and kind, calls, p50 wall). Every
investigation is the playbook reasoner on the replay sources, no servers; ``--strategies all`` is
every strategy of opsagent/strategies (hybrid, react, tot, plan, mcts, reflexion), with their default
options (a strategy may be given with options: ``tot:beam=3``).

Columns, per set and strategy: AC@1 and AC@3 (the true service among the first k suspects), Avg@5,
kind (the top suspect's fault kind is the true one, where the data set names one), ch@1 and ch@3
(change@k: the change that caused it among the report's first k changes, over the incidents whose
truth names one; "-" where none does), precision of
confirmed and of probable verdicts (their root-cause service is the true one; n in brackets), mean
tool calls, mean estimated tokens (observations and reasoner text, opsagent/tokens.py), mean model
calls of the same investigations with the LLM reasoner and the scripted model that ships in the
package (``follow_hints``: it measures the machinery, not a model's judgement; ``--no-llm`` skips
that pass), how many investigations stayed within their budgets (steps per hypothesis, tokens, wall
clock; the loop checks the budget before each call, so the calls in flight when it is crossed may
overrun it by their observations), the largest token count as a share of the token budget (max), p50
and max wall time of an investigation (loading the fixture excluded), and the best
published figure on the same data. With more than one strategy: the seeds' cost model (model calls
per task, from the options used) beside the measured calls, and hybrid's tokens against tot's (the
seeds claim about a quarter). Then the same without the recordings' ``signals:`` blocks (what a user
who never mapped their metric names gets), a table of confidence against accuracy, and with
``--ablate`` the AC@1 of hybrid with each localisation rule of opsagent/ranking.py switched off, and
the incidents each rule decides (lost or gained with it off).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from opsagent import ranking  # noqa: E402
from opsagent.fixtures import Recording, Truth, load  # noqa: E402
from opsagent.llm import ChatClient, FunctionModel, LLMReasoner, follow_hints  # noqa: E402
from opsagent.logconfig import configure  # noqa: E402
from opsagent.loop import Budget  # noqa: E402
from opsagent.models import Report  # noqa: E402
from opsagent.pipeline import investigate_recording  # noqa: E402
from opsagent.plan import load_default_playbooks  # noqa: E402
from opsagent.playbooks import Playbook  # noqa: E402
from opsagent.reasoner import Reasoner  # noqa: E402
from opsagent.scoreboard import IncidentScore, score  # noqa: E402
from opsagent.settings import LLMSettings  # noqa: E402
from opsagent.strategies import STRATEGIES, strategy  # noqa: E402

RCA_DEV = ("nezha-tt", "nezha-ob", "changerca")
STARTED = time.perf_counter()
ALL_SETS = ("corpus", "rollouts", "petshop", *RCA_DEV, "cloudopsbench")

#: The best published service-level figure on the same data (top-1), and where it comes from.
PUBLISHED = {
    "corpus": "-",
    "rollouts": "-",
    "petshop": "0.706 authors' traversal baseline (all issues)",
    "nezha-tt": "0.867 / 0.978 Nezha (FSE'23, 45 cases)",
    "nezha-ob": "0.929 / 0.964 Nezha (FSE'23, 56 cases)",
    "changerca": "0.45-0.51 service localisers; change HR@1 0.882 ChangeRCA",
    "cloudopsbench": "A@1 0.73 OB / 0.58 TT (whole benchmark; category+component+fault type)",
}


@dataclass(frozen=True)
class Case:
    recording: Recording
    truth: Truth


@dataclass(frozen=True)
class Run:
    case: Case
    report: Report
    score: IncidentScore
    wall_ms: float
    model_calls: int | None = None  # the same investigation with the LLM reasoner and the scripted model


def scripted_reasoner(books: Sequence[Playbook]) -> Reasoner:
    """The LLM reasoner over the real HTTP client, answered by the scripted model that ships in the package."""
    settings = LLMSettings(model="follow-hints", mode="tools")
    client = ChatClient.from_settings(settings, transport=FunctionModel(follow_hints).transport())
    return LLMReasoner(client=client, playbooks=books, settings=settings)


def _petshop_module():  # type: ignore[no-untyped-def]
    path = ROOT / "benchmarks" / "datasets" / "petshop.py"
    spec = importlib.util.spec_from_file_location("petshop_converter", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _load_dir(directory: Path) -> list[Case]:
    cases = []
    for d in sorted(p for p in directory.iterdir() if (p / "incident.yaml").exists()):
        recording, truth = load(d)
        if truth is None:
            raise SystemExit(f"{d}: no truth to score against")
        cases.append(Case(recording, truth))
    return cases


def concurrent_rollouts(case: Case) -> bool:
    """Whether a recording has two or more rollouts (deploys) in flight."""
    return sum(1 for c in case.recording.changes if c.kind in ("deploy", "rollout")) >= 2


def load_set(name: str, shared: Path, tmp: Path) -> list[Case]:
    if name == "corpus":
        return _load_dir(ROOT / "fixtures" / "incidents")
    if name == "rollouts":  # the recorded incidents with concurrent rollouts
        return [c for c in _load_dir(ROOT / "fixtures" / "incidents") if concurrent_rollouts(c)]
    if name == "petshop":
        petshop = _petshop_module()
        made = petshop.convert(shared / "petshop", tmp / "petshop", ("test",))
        return [c for m in made for c in _load_dir(m.path.parent) if c.recording.slug == m.path.name]
    if name == "cloudopsbench":
        return _load_dir(shared / "cloudopsbench-dev")
    return _load_dir(shared / "rca-dev" / name)


async def run_set(
    cases: Sequence[Case], *, spec: str, books: Sequence[Playbook], use_signals: bool = True, llm: bool = False
) -> list[Run]:
    runs = []
    for case in cases:
        started = time.perf_counter()
        report = await investigate_recording(
            case.recording, playbooks=books, strategy_name=spec, use_signals=use_signals
        )
        wall = (time.perf_counter() - started) * 1000
        calls = None
        if llm:
            modelled = await investigate_recording(
                case.recording,
                reasoner=scripted_reasoner(books),
                strategy_name=spec,
                use_signals=use_signals,
            )
            calls = modelled.llm.usage.calls if modelled.llm is not None else 0
        scored = score(case.recording.slug, report, case.truth)
        kept = report.model_copy(update={"observations": []})  # every figure here is read without them
        runs.append(Run(case, kept, scored, wall, calls))
    return runs


def within_budget(report: Report, budget: Budget) -> bool:
    """Steps per hypothesis, tokens and wall clock at most what the budget allows."""
    return (
        all(len(r.steps) <= budget.max_steps for r in report.results)
        and report.cost.tokens <= budget.token_budget
        and report.cost.wall_ms <= budget.wall_s * 1000
    )


def search_tokens(report: Report) -> int:
    """The tokens of the search itself: every hypothesis' steps (triage and react's opening reads excluded)."""
    return sum(s.tokens for r in report.results for s in r.steps)


def ac(runs: Sequence[Run], k: int) -> float:
    return sum(1 for r in runs if r.score.rank is not None and r.score.rank <= k) / len(runs) if runs else 0.0


def precision(runs: Sequence[Run], status: str) -> str:
    chosen = [r for r in runs if r.report.status == status]
    if not chosen:
        return "   -   "
    right = sum(1 for r in chosen if r.report.root_cause and r.report.root_cause.component == r.case.truth.target)
    return f"{right / len(chosen):.2f}({len(chosen):>2})"


def change_at(runs: Sequence[Run], k: int) -> str:
    """change@k over the runs whose truth names the change that caused them ("-" when none does)."""
    scored = [r for r in runs if r.case.truth.change_ids]
    if not scored:
        return "    -"
    hits = sum(1 for r in scored if r.score.change_rank is not None and r.score.change_rank <= k)
    return f"{hits / len(scored):>5.3f}"


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def row(name: str, label: str, runs: Sequence[Run], published: str) -> str:
    n = len(runs)
    kinds = [r.score.kind_hit for r in runs if r.case.truth.kind != "unknown"]
    kind = f"{sum(kinds) / len(kinds):>5.3f}" if kinds else "    -"
    avg5 = sum(ac(runs, k) for k in range(1, 6)) / 5
    calls = mean([r.report.cost.tool_calls for r in runs])
    tokens = mean([r.report.cost.tokens for r in runs])
    modelled = [r.model_calls for r in runs if r.model_calls is not None]
    llm = f"{mean(modelled):>5.1f}" if modelled else "    -"
    budget = Budget()
    kept = sum(within_budget(r.report, budget) for r in runs)
    most = max(r.report.cost.tokens for r in runs) / budget.token_budget
    walls = [r.wall_ms for r in runs]
    return (
        f"{name:<10} {label:<9} {n:>3} {ac(runs, 1):>5.3f} {ac(runs, 3):>5.3f} {avg5:>5.3f} {kind} "
        f"{change_at(runs, 1)} {change_at(runs, 3)} "
        f"{precision(runs, 'confirmed'):>8} {precision(runs, 'probable'):>8} {calls:>5.1f} {tokens:>6.0f} "
        f"{llm} {f'{kept}/{n}':>7} {most:>5.2f} {median(walls):>6.0f} {max(walls):>6.0f}  {published}"
    )


HEADER = (
    f"{'set':<10} {'strategy':<9} {'n':>3} {'AC@1':>5} {'AC@3':>5} {'Avg@5':>5} {'kind':>5} {'ch@1':>5} {'ch@3':>5} "
    f"{'P(conf)':>8} "
    f"{'P(prob)':>8} {'calls':>5} {'tokens':>6} {'llm':>5} {'budget':>7} {'max':>5} {'p50ms':>6} {'maxms':>6}  "
    "published (top-1 / top-3)"
)


def component_and_kind(run: Run) -> bool:
    """The top suspect names the true component and the true kind."""
    return run.score.hit1 and bool(run.score.top) and run.score.top[0][1] == run.case.truth.kind


def confirmed_right(runs: Sequence[Run]) -> str:
    """Confirmed verdicts whose root cause is the true component with the true kind (n in brackets)."""
    chosen = [r for r in runs if r.report.status == "confirmed" and r.report.root_cause is not None]
    if not chosen:
        return "   -   "
    right = sum(
        1
        for r in chosen
        if r.report.root_cause is not None
        and (r.report.root_cause.component, r.report.root_cause.kind) == (r.case.truth.target, r.case.truth.kind)
    )
    return f"{right / len(chosen):.2f}({len(chosen):>2})"


def group_of(run: Run) -> tuple[str, str]:
    """(system, category) of a converted Cloud-OpsBench case: the system is the slug's middle part
    (``cob-ob-002``: ob), the category the benchmark's own (truth.raw_fault_taxonomy)."""
    parts = run.case.recording.slug.split("-")
    system = parts[1] if len(parts) > 2 else "?"
    extra = run.case.truth.model_extra or {}
    return system, str(extra.get("raw_fault_taxonomy", "?"))


BREAKDOWN_HEADER = (
    f"{'system':<6} {'category':<22} {'n':>3} {'AC@1':>5} {'AC@3':>5} {'kind':>5} {'c+k@1':>5} "
    f"{'conf':>4} {'prob':>4} {'inc':>4} {'P(c+k|conf)':>11} {'calls':>5} {'p50ms':>6}"
)


def breakdown(runs: Sequence[Run]) -> list[str]:
    """Per system and per category: component AC@1/AC@3, kind accuracy, component+kind @1, verdict
    counts, how many confirmed verdicts name the true component and kind, calls, p50 wall."""
    groups: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        system, category = group_of(r)
        groups.setdefault((system, "(all)"), []).append(r)
        groups.setdefault((system, category), []).append(r)
    lines = [BREAKDOWN_HEADER, "-" * len(BREAKDOWN_HEADER)]
    for (system, category), chosen in sorted(groups.items()):
        kinds = [r.score.kind_hit for r in chosen if r.case.truth.kind != "unknown"]
        kind = f"{sum(kinds) / len(kinds):>5.2f}" if kinds else "    -"
        status = [r.report.status for r in chosen]
        lines.append(
            f"{system:<6} {category:<22} {len(chosen):>3} {ac(chosen, 1):>5.2f} {ac(chosen, 3):>5.2f} {kind} "
            f"{sum(map(component_and_kind, chosen)) / len(chosen):>5.2f} {status.count('confirmed'):>4} "
            f"{status.count('probable'):>4} {status.count('inconclusive'):>4} {confirmed_right(chosen):>11} "
            f"{mean([r.report.cost.tool_calls for r in chosen]):>5.1f} {median([r.wall_ms for r in chosen]):>6.0f}"
        )
    without = sum(1 for r in runs if not r.report.suspects)
    lines.append(f"investigations without a suspect: {without} of {len(runs)}")
    return lines


def cost_model(name: str, budget: Budget) -> tuple[str, int]:
    """The seeds' model of model calls per task for a strategy, from its options and the budget: ReAct
    O(n), Reflexion O(n*k), ToT O(b*d*w); hybrid is k proposals and b ReAct runs; plan and mcts follow
    the same counting (the seeds give no figure for them)."""
    chosen = strategy(name)
    o = chosen.options.model_dump()
    n, k, b = budget.max_steps, budget.k, budget.beam
    if chosen.name == "react":
        return f"n = {n}", n
    if chosen.name == "hybrid":
        return f"k + b*n = {k} + {b}*{n}", k + b * n
    if chosen.name == "tot":
        w, d, bb = o["breadth"] or k, o["depth"] or n, o["beam"] or b
        return f"b*d*w = {bb}*{d}*{w}", bb * d * w
    if chosen.name == "reflexion":
        return f"n*K = {n}*{o['attempts']}", n * o["attempts"]
    if chosen.name == "plan":
        width = o["width"] or b
        return f"1 + w*n + r = 1 + {width}*{n} + {o['replans']}", 1 + width * n + o["replans"]
    if chosen.name == "mcts":
        i, r = o["iterations"], o["rollout"]
        return f"k + I*(r+1) = {k} + {i}*({r}+1)", k + i * (r + 1)
    return "-", 0


def cost_table(by_strategy: dict[str, list[Run]]) -> list[str]:
    budget = Budget()
    lines = [
        f"{'strategy':<12} {'seeds cost model (calls per task)':<36} {'model':>5} {'llm calls':>9} "
        f"{'steps':>6} {'calls':>6} {'tokens':>7}",
    ]
    for name, runs in by_strategy.items():
        formula, calls = cost_model(name, budget)
        modelled = [r.model_calls for r in runs if r.model_calls is not None]
        llm = f"{mean(modelled):>9.1f}" if modelled else f"{'-':>9}"
        lines.append(
            f"{name:<12} {formula:<36} {calls:>5} {llm} {mean([r.report.cost.steps for r in runs]):>6.1f} "
            f"{mean([r.report.cost.tool_calls for r in runs]):>6.1f} {mean([r.report.cost.tokens for r in runs]):>7.0f}"
        )
    return lines


def tot_ratio(per_set: dict[str, dict[str, list[Run]]]) -> list[str]:
    """hybrid tokens / tot tokens per set (the seeds: about 1/4), and the AC@1 each gets."""
    lines = [
        f"{'set':<10} {'hybrid tok':>10} {'tot tok':>8} {'ratio':>6} {'search ratio':>12} "
        f"{'hybrid AC@1':>11} {'tot AC@1':>8} {'gap':>6}  target (ratio <= 0.30, gap <= 0.03)"
    ]
    for name, runs in per_set.items():
        if "hybrid" not in runs or "tot" not in runs:
            continue
        h, t = runs["hybrid"], runs["tot"]
        ht, tt = mean([r.report.cost.tokens for r in h]), mean([r.report.cost.tokens for r in t])
        hs, ts = mean([search_tokens(r.report) for r in h]), mean([search_tokens(r.report) for r in t])
        gap = ac(h, 1) - ac(t, 1)
        met = "met" if tt and ht / tt <= 0.30 and abs(gap) <= 0.03 else "not met"
        lines.append(
            f"{name:<10} {ht:>10.0f} {tt:>8.0f} {ht / tt if tt else 0:>6.2f} {hs / ts if ts else 0:>12.2f} "
            f"{ac(h, 1):>11.3f} {ac(t, 1):>8.3f} {gap:>+6.3f}  {met}"
        )
    return lines


#: Confidence bins of the calibration table (the report's printed confidence).
BINS = ((0.0, 0.0), (0.01, 0.5), (0.51, 0.65), (0.66, 0.8), (0.81, 1.0))


def raw_kind(run: Run) -> str:
    """The data set's own fault label where it has one (``truth.raw_kind``), else the taxonomy's kind."""
    extra = run.case.truth.model_extra or {}
    return str(extra.get("raw_kind") or run.case.truth.kind)


def day_of(run: Run) -> str:
    """The day a recording's name carries (YYYY-MM-DD), or "-"."""
    found = re.search(r"\d{4}-\d{2}-\d{2}", run.case.recording.slug)
    return found.group(0) if found else "-"


def slices(name: str, runs: Sequence[Run], key: Callable[[Run], str]) -> list[str]:
    """AC@1, AC@3, kind and confirmed verdicts (right on service and kind) per slice of a set."""
    groups: dict[str, list[Run]] = {}
    for r in runs:
        groups.setdefault(key(r), []).append(r)
    lines = []
    for label, chosen in sorted(groups.items()):
        conf = [r for r in chosen if r.report.status == "confirmed"]
        right = sum(1 for r in conf if r.score.hit1 and r.score.kind_hit)
        kind = sum(r.score.kind_hit for r in chosen) / len(chosen)
        lines.append(
            f"{name:<10} {label:<20} {len(chosen):>4} {ac(chosen, 1):>6.3f} {ac(chosen, 3):>6.3f} {kind:>6.3f} "
            f"{len(conf):>5} {right:>5}"
        )
    return lines


SLICE_HEADER = f"{'set':<10} {'slice':<20} {'n':>4} {'AC@1':>6} {'AC@3':>6} {'kind':>6} {'conf':>5} {'right':>5}"


def moved(before: Sequence[Run], after: Sequence[Run]) -> list[str]:
    """The incidents whose AC@1 differs between two runs of the same cases, each marked - (lost in
    ``after``) or + (gained), so an ablation says which cases a rule decides, not only how many."""
    hits = {r.case.recording.slug: r.score.hit1 for r in after}
    return [
        ("+" if hits[r.case.recording.slug] else "-") + r.case.recording.slug
        for r in before
        if hits.get(r.case.recording.slug, r.score.hit1) != r.score.hit1
    ]


def calibration(runs: Sequence[Run]) -> list[str]:
    lines = [f"{'confidence':<12} {'n':>4} {'top suspect right':>18} {'root cause right':>17}"]
    for lo, hi in BINS:
        chosen = [r for r in runs if lo <= r.report.confidence <= hi]
        if not chosen:
            continue
        top = sum(r.score.hit1 for r in chosen) / len(chosen)
        named = [(r.report.root_cause.component, r.case.truth.service) for r in chosen if r.report.root_cause]
        cause = f"{sum(a == b for a, b in named) / len(named):.3f}" if named else "-"
        label = f"{lo:.2f}" if lo == hi else f"{lo:.2f}-{hi:.2f}"
        lines.append(f"{label:<12} {len(chosen):>4} {top:>18.3f} {cause:>17}")
    return lines


async def main(args: argparse.Namespace) -> None:
    configure(level="error")
    books = load_default_playbooks()
    sets = [s for s in args.sets.split(",") if s]
    strategies = list(STRATEGIES) if args.strategies == "all" else [s for s in args.strategies.split(",") if s]
    for name in strategies:
        strategy(name)  # a bad name or option fails before anything runs
    with tempfile.TemporaryDirectory(prefix="rca-bench-") as tmp:
        loaded = {}
        for name in sets:
            if name != "corpus" and not args.shared.is_dir():
                print(f"skipping {name}: {args.shared} is not here")
                continue
            loaded[name] = load_set(name, args.shared, Path(tmp))
        print(HEADER)
        print("-" * len(HEADER))
        everything: list[Run] = []
        per_set: dict[str, dict[str, list[Run]]] = {}
        for name, cases in loaded.items():
            for chosen in strategies:
                runs = await run_set(cases, spec=chosen, books=books, llm=not args.no_llm)
                per_set.setdefault(name, {})[chosen] = runs
                print(row(name, chosen, runs, PUBLISHED[name] if chosen == strategies[0] else ""), flush=True)
                if chosen == "hybrid":
                    everything.extend(runs)
                if name == "cloudopsbench":
                    print(f"\n{name}, {chosen}, per system and category:")
                    print("\n".join(breakdown(runs)) + "\n")
                if args.misses and chosen == "hybrid":
                    for r in runs:
                        if not r.score.hit1:
                            top = ", ".join(f"{c}/{k}" for c, k in r.score.top)
                            print(
                                f"    miss {r.case.recording.slug}: truth {r.case.truth.service}, rank "
                                f"{r.score.rank}, {r.report.status}; top {top}"
                            )
        if len(strategies) > 1:
            by_strategy = {c: [r for runs in per_set.values() for r in runs[c]] for c in strategies}
            print("\nthe seeds' cost model beside what was measured (means per investigation, all sets):")
            print("\n".join(cost_table(by_strategy)))
            ratio = tot_ratio(per_set)
            if len(ratio) > 1:
                print("\nhybrid tokens / tot tokens (the seeds: ~1/4; search ratio: hypotheses' steps only):")
                print("\n".join(ratio))
        hybrid_sets = {n: runs["hybrid"] for n, runs in per_set.items() if "hybrid" in runs}
        if hybrid_sets:
            print("\nhybrid per fault kind (the data set's own label; conf: confirmed, right: on service and kind):")
            print(SLICE_HEADER)
            for name, runs in hybrid_sets.items():
                print("\n".join(slices(name, runs, raw_kind)))
            print("\nhybrid per day (where the recordings' names carry one):")
            print(SLICE_HEADER)
            for name, runs in hybrid_sets.items():
                print("\n".join(slices(name, runs, day_of)))
        if everything:
            conf = [r for r in everything if r.report.status == "confirmed"]
            right = sum(1 for r in conf if r.report.root_cause and r.report.root_cause.component == r.case.truth.target)
            both = sum(1 for r in conf if r.score.hit1 and r.score.kind_hit)
            print(
                f"\nhybrid, all sets: {len(conf)} confirmed verdicts, {right} on the true service"
                + (f" (precision {right / len(conf):.3f})" if conf else "")
                + (f", {both} on the true service and kind (precision {both / len(conf):.3f})" if conf else "")
            )
            named = [r for r in conf if r.report.change is not None and r.case.truth.change_ids]
            on_truth = sum(1 for r in named if set(r.report.change.ids) & set(r.case.truth.change_ids))  # type: ignore[union-attr]
            print(f"hybrid, all sets: {len(named)} confirmed verdicts name a change, {on_truth} the true change")
            print("\nconfidence against accuracy, hybrid, all sets:")
            print("\n".join(calibration(everything)))
        if not args.no_signals_table:
            print("\nwithout the recordings' signals: blocks (signal discovery only):")
            print(HEADER)
            print("-" * len(HEADER))
            for name, cases in loaded.items():
                if not any(c.recording.signals for c in cases):
                    continue
                for chosen in strategies:
                    runs = await run_set(cases, spec=chosen, books=books, use_signals=False)
                    print(row(name, chosen, runs, ""), flush=True)
        if args.ablate:
            print("\nhybrid AC@1 / kind with one localisation rule switched off (opsagent/ranking.py RULES):")
            names = list(loaded)
            print(f"{'rule':<22} " + " ".join(f"{n:>11}" for n in names))

            def cell(runs: Sequence[Run]) -> str:
                kind = sum(r.score.kind_hit for r in runs) / len(runs) if runs else 0.0
                return f"{ac(runs, 1):.2f}/{kind:.2f}"

            base_runs = [await run_set(loaded[n], spec="hybrid", books=books) for n in names]
            print(f"{'(all rules on)':<22} " + " ".join(f"{cell(r):>11}" for r in base_runs))
            moved_by: dict[str, list[str]] = {}
            for rule in args.rules.split(",") if args.rules else ranking.RULES:
                with ranking.without(rule):
                    runs = [await run_set(loaded[n], spec="hybrid", books=books) for n in names]
                print(f"{rule:<22} " + " ".join(f"{cell(r):>11}" for r in runs), flush=True)
                pairs = zip(base_runs, runs, strict=True)
                moved_by[rule] = [m for before, after in pairs for m in moved(before, after)]
            print("\nthe incidents each rule decides at AC@1 (-: lost with the rule off, +: gained):")
            for rule, moved_here in moved_by.items():
                print(f"{rule:<22} {' '.join(moved_here) or '-'}")
    print(
        f"\n{time.strftime('%Y-%m-%d')}, playbook reasoner, replay sources, one run each"
        + ("" if args.no_llm else "; llm: the LLM reasoner with the packaged scripted model (follow_hints)")
        + f"; {time.perf_counter() - STARTED:.0f} s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "datasets")
    parser.add_argument("--sets", default=",".join(ALL_SETS))
    parser.add_argument("--strategies", default="hybrid,react", help="comma-separated, or all")
    parser.add_argument("--no-llm", action="store_true", help="skip the pass with the LLM reasoner (llm column)")
    parser.add_argument("--ablate", action="store_true", help="AC@1 with each ranking rule switched off")
    parser.add_argument("--rules", default="", help="with --ablate: only these rules (comma-separated)")
    parser.add_argument("--no-signals-table", action="store_true")
    parser.add_argument("--misses", action="store_true", help="list hybrid's misses at top-1")
    asyncio.run(main(parser.parse_args()))
