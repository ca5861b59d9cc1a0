"""Convert the PetShop RCA data set into recorded incidents (fixtures), then score opsagent on them.

    python benchmarks/datasets/petshop.py convert ../shared/datasets/petshop --out /tmp/petshop
    python benchmarks/datasets/petshop.py evaluate ../shared/datasets/petshop [--split test]

PetShop (Hardt et al., "The PetShop Dataset — Finding Causes of Performance Issues across
Microservices", CLeaR 2024; github.com/amazon-science/petshop-root-cause-analysis, data CC-BY-4.0)
has 68 injected issues in a 41-component AWS application, metrics only, at 5-minute resolution.
Per issue: ``metrics.csv`` (a wide table: component, metric, statistic header rows, then rows),
``target.json`` (the alerting node/metric/time, and ``root_cause.node``). ``metadata`` in target.json
reveals the injected fault: it is never read into a fixture (a test checks it).

Each issue becomes a fixture: one series per (component, metric, statistic), the call graph from
``graph.csv`` as declared topology, the alert from ``target``, the truth from ``root_cause.node``, and
the scenario's normal-operation history (``noissue/metrics.csv``, another period) as the baseline
where the snapshot has it. The data are read from where they are; nothing is copied into the repo.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import sys
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SCENARIOS = ("low_traffic", "high_traffic", "temporal_traffic1", "temporal_traffic2")
STEP_S = 300

#: PetShop's (metric, statistic) -> series name in the fixture.
SERIES = {
    ("latency", "Average"): "latency_average_seconds",
    ("latency", "p50"): "latency_p50_seconds",
    ("latency", "p90"): "latency_p90_seconds",
    ("latency", "p95"): "latency_p95_seconds",
    ("latency", "p99"): "latency_p99_seconds",
    ("requests", "Sum"): "requests_sum",
    ("availability", "Average"): "availability_ratio",
}

#: The environment's signal catalog: which of its series mean which semantic signal.
SIGNALS = {
    "latency_p99": {"query": 'latency_p99_seconds{service="$service"}', "unit": "s"},
    "latency_avg": {"query": 'latency_average_seconds{service="$service"}', "unit": "s", "direction": "up"},
    "request_rate": {"query": 'requests_sum{service="$service"}', "unit": "req/5min", "direction": "any"},
    "availability": {"query": 'availability_ratio{service="$service"}', "unit": "ratio", "direction": "down"},
}


def read_wide(path: Path) -> dict[tuple[str, str, str], list[tuple[float, float]]]:
    """(component, metric, statistic) -> [(unix_s, value)], skipping empty cells."""
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    components, metrics, stats = rows[0], rows[1], rows[2]
    out: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
    for row in rows[3:]:
        if not row or not row[0] or row[0] == "unix_timestamp":
            continue
        ts = float(row[0])
        for i, cell in enumerate(row[1:], start=1):
            if cell.strip():
                out[(components[i], metrics[i], stats[i])].append((ts, float(cell)))
    return out


def read_graph(path: Path) -> list[dict[str, str]]:
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


def convert_issue(
    issue: Path, scenario: Path, out: Path, baseline: dict[Any, list[tuple[float, float]]] | None
) -> Path:
    target = json.loads((issue / "target.json").read_text())
    alert_node = target["target"]["node"]
    alert_metric = target["target"]["metric"]
    alert_ts = float(target["target"]["timestamp"])
    truth_node = target["root_cause"]["node"]  # only these two fields of target.json are read
    series = read_wide(issue / "metrics.csv")
    times = sorted({t for samples in series.values() for t, _ in samples})
    header: dict[str, Any] = {
        "alert": {
            "labels": {
                "alertname": f"{alert_node}{'Latency' if alert_metric == 'latency' else 'Availability'}SLO",
                "service": alert_node,
                "severity": "page",
            },
            "annotations": {
                "summary": f"{alert_node} {alert_metric} {'high' if alert_metric == 'latency' else 'low'}",
            },
            "startsAt": iso(alert_ts),
        },
        "window": {"start": iso(times[0]), "end": iso(times[-1] + STEP_S)},
        "topology": read_graph(scenario / "graph.csv"),
        "signals": SIGNALS,
        "meta": (
            f"PetShop data set, scenario {scenario.name}, {issue.parent.name}/{issue.name}: metrics only, 5-minute "
            "resolution, converted by benchmarks/datasets/petshop.py"
            + (
                "; baseline from the scenario's normal-operation history (another period)"
                if baseline
                else "; no normal-operation history in the snapshot: the baseline is the issue's own samples before the alert"
            )
        ),
        "truth": {"service": truth_node, "kind": "unknown", "summary": "PetShop root_cause.node"},
    }
    records = []
    for (component, metric, stat), samples in sorted(series.items()):
        name = SERIES.get((metric, stat))
        if name is None:
            continue
        history = baseline.get((component, metric, stat), []) if baseline else []
        records.append({"labels": {"__name__": name, "service": component}, "samples": sorted(history + samples)})
    if baseline:
        base_times = sorted({t for samples in baseline.values() for t, _ in samples})
        header["baseline"] = {"start": iso(base_times[0]), "end": iso(base_times[-1] + STEP_S)}
    target_dir = out / f"petshop-{scenario.name}-{issue.parent.name}-{issue.name}"
    target_dir.mkdir(parents=True, exist_ok=True)
    (target_dir / "incident.yaml").write_text(yaml.safe_dump(header, sort_keys=False))
    with (target_dir / "metrics.jsonl").open("w") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")
    return target_dir


def convert(dataset: Path, out: Path, splits: tuple[str, ...] = ("train", "test")) -> list[Path]:
    made = []
    for name in SCENARIOS:
        scenario = dataset / name
        if not scenario.is_dir():
            continue
        noissue = scenario / "noissue" / "metrics.csv"
        baseline = read_wide(noissue) if noissue.exists() else None
        for split in splits:
            for issue in sorted((scenario / split).glob("issue_*"), key=lambda p: int(p.name.split("_")[1])):
                made.append(convert_issue(issue, scenario, out, baseline))
    return made


async def evaluate(dataset: Path, split: str, workdir: Path) -> None:
    from opsagent.logconfig import configure
    from opsagent.scoreboard import replay

    configure(level="error")
    dirs = convert(dataset, workdir, splits=(split,))
    board = await replay(workdir, dirs=dirs)
    groups: dict[str, list[Any]] = defaultdict(list)
    for s in board.scores:
        scenario = s.slug.split("-")[1]
        groups["temporal_traffic" if scenario.startswith("temporal") else scenario].append(s)
        groups["overall"].append(s)
    print(f"PetShop, {split} issues, opsagent hybrid (playbook reasoner), metrics only")
    print(f"{'scenario':<18} {'n':>3} {'AC@1':>6} {'AC@3':>6} {'Avg@5':>6}")
    for name in ("low_traffic", "high_traffic", "temporal_traffic", "overall"):
        scores = groups.get(name, [])
        if not scores:
            continue
        ac = [sum(1 for s in scores if s.rank is not None and s.rank <= k) / len(scores) for k in range(1, 6)]
        print(f"{name:<18} {len(scores):>3} {ac[0]:>6.3f} {ac[2]:>6.3f} {sum(ac) / 5:>6.3f}")
    misses = [
        f"{s.slug}: truth {s.truth_service}, got {s.top[0][0] if s.top else None}" for s in board.scores if not s.hit1
    ]
    print(f"\nmissed at top-1 ({len(misses)}):")
    for m in misses:
        print("  " + m)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="write fixtures")
    c.add_argument("dataset", type=Path)
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--split", choices=("train", "test", "both"), default="both")
    e = sub.add_parser("evaluate", help="convert into a temporary directory and score")
    e.add_argument("dataset", type=Path)
    e.add_argument("--split", choices=("train", "test"), default="test")
    args = parser.parse_args()
    if args.command == "convert":
        splits = ("train", "test") if args.split == "both" else (args.split,)
        made = convert(args.dataset, args.out, splits)
        print(f"wrote {len(made)} incidents to {args.out}")
    else:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="petshop-") as tmp:
            asyncio.run(evaluate(args.dataset, args.split, Path(tmp)))


if __name__ == "__main__":
    main()
