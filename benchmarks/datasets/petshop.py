"""Convert the PetShop RCA data set into recorded incidents (fixtures), then score opsagent on them.

    python benchmarks/datasets/petshop.py convert ../shared/datasets/petshop --out /tmp/petshop
    python benchmarks/datasets/petshop.py evaluate ../shared/datasets/petshop [--split test|train|all]

PetShop (Hardt et al., "The PetShop Dataset — Finding Causes of Performance Issues across
Microservices", CLeaR 2024; github.com/amazon-science/petshop-root-cause-analysis, data CC-BY-4.0)
has 68 injected issues in a 41-component AWS application, metrics only, at 5-minute resolution.
Per issue: ``metrics.csv`` (a wide table: component, metric, statistic header rows, then rows),
``target.json`` (the alerting node/metric/time, and ``root_cause.node``). ``metadata`` in target.json
reveals the injected fault: it is never read into a fixture (a test checks it).

Each issue becomes a fixture: one series per (component, metric, statistic), the call graph from
``graph.csv`` (rows call columns) as declared topology, the alert from ``target``, the truth from
``root_cause.node``, and the scenario's normal-operation history (``noissue/metrics.csv``, another
period) as the baseline where the snapshot has it. The fixture holds what an investigation started
``--minutes-after`` the alert (default 10) could have read: 5-minute rows complete by then, so the
first full row after the alert, the row the published baseline scores. The data are read from where
they are; nothing is copied into the repository.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SCENARIOS = ("low_traffic", "high_traffic", "temporal_traffic1", "temporal_traffic2")
GROUPS = ("low_traffic", "high_traffic", "temporal_traffic")
STEP_S = 300
MINUTES_AFTER = 10

#: PetShop's (metric, statistic) -> series name in the fixture.
SERIES = {
    ("latency", "Average"): "latency_average_seconds",
    ("latency", "p50"): "latency_p50_seconds",
    ("latency", "p90"): "latency_p90_seconds",
    ("latency", "p95"): "latency_p95_seconds",
    ("latency", "p99"): "latency_p99_seconds",
    ("requests", "Sum"): "requests_sum",
    ("availability", "Average"): "availability_percent",
}


def _signal(name: str, unit: str, **extra: Any) -> dict[str, Any]:
    return {"query": f'{name}{{service="$service"}}', "unit": unit, **extra}


#: The environment's signal catalog: which of its series mean which semantic signal. Latencies
#: here are milliseconds, so a shift counts from 1 ms; availability is a percentage.
SIGNALS = {
    "latency_avg": _signal("latency_average_seconds", "s", direction="up", min_delta=0.001),
    "latency_p50": _signal("latency_p50_seconds", "s", direction="up", min_delta=0.001),
    "latency_p90": _signal("latency_p90_seconds", "s", direction="up", min_delta=0.001),
    "latency_p95": _signal("latency_p95_seconds", "s", direction="up", min_delta=0.001),
    "latency_p99": _signal("latency_p99_seconds", "s", min_delta=0.001),
    "request_rate": _signal("requests_sum", "req/5min", direction="any"),
    "availability": _signal("availability_percent", "%", direction="down", agg="mean", min_delta=0.5),
}

#: What the PetShop authors published for their anomaly-traversal baseline (MAD score, threshold 5):
#: code/RCA-Dataset-Eval.ipynb @ 1c5992d, printed output, over ALL issues (train and test) of each
#: scenario, split by the alert's metric. (scenario, metric) -> (n, top-1, top-3).
PUBLISHED = {
    ("low_traffic", "latency"): (14, 0.571, 0.571),
    ("low_traffic", "availability"): (12, 0.833, 1.000),
    ("high_traffic", "latency"): (14, 0.571, 0.786),
    ("high_traffic", "availability"): (12, 0.667, 1.000),
    ("temporal_traffic", "latency"): (8, 1.000, 1.000),
    ("temporal_traffic", "availability"): (8, 0.750, 1.000),
}

Samples = list[tuple[float, float]]
Wide = dict[tuple[str, str, str], Samples]


@dataclass(frozen=True)
class Converted:
    """One issue as a fixture, with what scoring groups it by (never shown to the agent)."""

    path: Path
    scenario: str
    split: str
    metric: str

    @property
    def group(self) -> str:
        return "temporal_traffic" if self.scenario.startswith("temporal") else self.scenario


def read_wide(path: Path) -> Wide:
    """(component, metric, statistic) -> [(unix_s, value)], skipping empty cells."""
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    components, metrics, stats = rows[0], rows[1], rows[2]
    out: Wide = defaultdict(list)
    for row in rows[3:]:
        if not row or not row[0] or row[0] == "unix_timestamp":
            continue
        ts = float(row[0])
        for i, cell in enumerate(row[1:], start=1):
            if cell.strip():
                out[(components[i], metrics[i], stats[i])].append((ts, float(cell)))
    return out


def read_graph(path: Path) -> list[dict[str, str]]:
    """The adjacency matrix as edges: a non-zero cell means the row's component calls the column's."""
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    callees = rows[0][1:]
    edges = []
    for row in rows[1:]:
        for callee, cell in zip(callees, row[1:], strict=False):
            if cell.strip() not in ("", "0", "0.0") and row[0] != callee:
                edges.append({"caller": row[0], "callee": callee, "source": "declared"})
    return edges


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def alert_of(node: str, metric: str, ts: float) -> dict[str, Any]:
    kind, way = ("Latency", "high") if metric == "latency" else ("Availability", "low")
    return {
        "labels": {"alertname": f"{node}{kind}SLO", "service": node, "severity": "page"},
        "annotations": {"summary": f"{node} {metric} {way}"},
        "startsAt": iso(ts),
    }


def convert_issue(
    issue: Path, scenario: Path, out: Path, baseline: Wide | None, *, minutes_after: float = MINUTES_AFTER
) -> Converted:
    target = json.loads((issue / "target.json").read_text())
    # Only these fields of target.json are read; ``metadata`` (the injected fault) never is.
    alert_node, alert_metric = target["target"]["node"], target["target"]["metric"]
    alert_ts = float(target["target"]["timestamp"])
    truth_node = target["root_cause"]["node"]
    cut = alert_ts + minutes_after * 60  # rows (stamped at their start) complete by then
    rows = read_wide(issue / "metrics.csv")
    series = {key: [(t, v) for t, v in samples if t + STEP_S <= cut] for key, samples in rows.items()}
    times = sorted({t for samples in series.values() for t, _ in samples})
    history = (
        "baseline from the scenario's normal-operation history (another period)"
        if baseline
        else "no normal-operation history in the snapshot: the baseline is the issue's own rows before the alert"
    )
    header: dict[str, Any] = {
        "alert": alert_of(alert_node, alert_metric, alert_ts),
        "window": {"start": iso(times[0]), "end": iso(max(times[-1] + STEP_S, cut))},
        "topology": read_graph(scenario / "graph.csv"),
        "signals": SIGNALS,
        "meta": (
            f"PetShop data set, scenario {scenario.name}, {issue.parent.name}/{issue.name}: metrics only, "
            f"5-minute rows complete {minutes_after:g} min after the alert; {history}; "
            "converted by benchmarks/datasets/petshop.py"
        ),
        "truth": {"service": truth_node, "kind": "unknown", "summary": "PetShop root_cause.node"},
    }
    if baseline:
        base_times = sorted({t for samples in baseline.values() for t, _ in samples})
        header["baseline"] = {"start": iso(base_times[0]), "end": iso(base_times[-1] + STEP_S)}
    records = []
    for (component, metric, stat), samples in sorted(series.items()):
        name = SERIES.get((metric, stat))
        if name is None or not samples:
            continue
        before = baseline.get((component, metric, stat), []) if baseline else []
        records.append({"labels": {"__name__": name, "service": component}, "samples": sorted(before + samples)})
    target_dir = out / f"petshop-{scenario.name}-{issue.parent.name}-{issue.name}"
    target_dir.mkdir(parents=True, exist_ok=True)
    (target_dir / "incident.yaml").write_text(yaml.safe_dump(header, sort_keys=False))
    with (target_dir / "metrics.jsonl").open("w") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")
    return Converted(path=target_dir, scenario=scenario.name, split=issue.parent.name, metric=alert_metric)


def convert(
    dataset: Path, out: Path, splits: Sequence[str] = ("train", "test"), *, minutes_after: float = MINUTES_AFTER
) -> list[Converted]:
    made = []
    for name in SCENARIOS:
        scenario = dataset / name
        if not scenario.is_dir():
            continue
        noissue = scenario / "noissue" / "metrics.csv"
        baseline = read_wide(noissue) if noissue.exists() else None
        for split in splits:
            for issue in sorted((scenario / split).glob("issue_*"), key=lambda p: int(p.name.split("_")[1])):
                made.append(convert_issue(issue, scenario, out, baseline, minutes_after=minutes_after))
    return made


@dataclass(frozen=True)
class Result:
    issue: Converted
    rank: int | None  # of the true component among the report's suspects
    top: str | None
    truth: str

    def hit(self, k: int) -> bool:
        return self.rank is not None and self.rank <= k


async def run(issues: list[Converted], workdir: Path) -> list[Result]:
    from opsagent.logconfig import configure
    from opsagent.scoreboard import replay

    configure(level="error")
    board = await replay(workdir, dirs=[c.path for c in issues])
    by_slug = {c.path.name: c for c in issues}
    return [
        Result(issue=by_slug[s.slug], rank=s.rank, top=s.top[0][0] if s.top else None, truth=s.truth_service)
        for s in board.scores
    ]


def ac(results: Sequence[Result], k: int) -> float:
    return sum(r.hit(k) for r in results) / len(results) if results else 0.0


def report(results: list[Result], *, split: str, minutes_after: float) -> str:
    lines = [
        f"PetShop, {split} issues, opsagent hybrid (playbook reasoner), metrics only, "
        f"rows complete {minutes_after:g} min after the alert",
        f"{'scenario':<18} {'n':>3} {'AC@1':>6} {'AC@3':>6} {'Avg@5':>6}",
    ]
    for group in (*GROUPS, "overall"):
        chosen = [r for r in results if group in ("overall", r.issue.group)]
        if chosen:
            avg5 = sum(ac(chosen, k) for k in range(1, 6)) / 5
            lines.append(f"{group:<18} {len(chosen):>3} {ac(chosen, 1):>6.3f} {ac(chosen, 3):>6.3f} {avg5:>6.3f}")
    lines += [
        "",
        "per alert metric, beside the authors' anomaly-traversal baseline (notebook, ALL issues):",
        f"{'scenario':<18} {'metric':<13} {'n':>3} {'top-1':>6} {'top-3':>6}   {'n':>3} {'top-1':>6} {'top-3':>6}",
    ]
    for (group, metric), (n, top1, top3) in PUBLISHED.items():
        chosen = [r for r in results if r.issue.group == group and r.issue.metric == metric]
        if chosen:
            lines.append(
                f"{group:<18} {metric:<13} {len(chosen):>3} {ac(chosen, 1):>6.3f} {ac(chosen, 3):>6.3f}"
                f"   {n:>3} {top1:>6.3f} {top3:>6.3f}"
            )
    misses = [r for r in results if not r.hit(1)]
    lines += ["", f"missed at top-1 ({len(misses)}):"]
    lines += [f"  {r.issue.path.name}: truth {r.truth}, top {r.top}, truth ranked {r.rank}" for r in misses]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("convert", "write fixtures"), ("evaluate", "convert into a temporary directory and score")):
        p = sub.add_parser(name, help=text)
        p.add_argument("dataset", type=Path)
        p.add_argument("--split", choices=("train", "test", "all"), default="all" if name == "convert" else "test")
        p.add_argument("--minutes-after", type=float, default=MINUTES_AFTER, help="how long after the alert it runs")
        if name == "convert":
            p.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    splits = ("train", "test") if args.split == "all" else (args.split,)
    if args.command == "convert":
        made = convert(args.dataset, args.out, splits, minutes_after=args.minutes_after)
        print(f"wrote {len(made)} incidents to {args.out}")
        return
    with tempfile.TemporaryDirectory(prefix="petshop-") as tmp:
        issues = convert(args.dataset, Path(tmp), splits, minutes_after=args.minutes_after)
        results = asyncio.run(run(issues, Path(tmp)))
    print(report(results, split=args.split, minutes_after=args.minutes_after))


if __name__ == "__main__":
    main()
