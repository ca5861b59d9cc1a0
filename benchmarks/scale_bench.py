"""Large systems: one recorded incident copied x1, x4, x16 side by side, each investigated in its own
process; prints the growth table (CPU seconds and peak RSS of that process).

    python benchmarks/scale_bench.py [INCIDENT] [--scales 1 4 16] [--repeat 3]

INCIDENT is a recorded-incident directory (default: the largest TrainTicket incident of
../shared/datasets/rca-dev/nezha-tt, read in place; any fixture works). Copy ``i`` (i >= 1) is the
same system under other names: every service, pod, caller and callee gets the suffix ``-x<i>``,
every trace and span id the suffix ``-<i>``, so the copies share no call, trace or series with the
original; the alert, window and truth stay those of copy 0. The copies are written to a temporary
directory and removed afterwards, never into the repository.

Each process runs ``opsagent investigate DIR --json --no-lessons`` (start-up included); a bare
``python -c pass`` is timed first as the floor. CPU is user + system of that process alone
(``os.wait4``), peak is its ``ru_maxrss``; the median over ``--repeat`` runs is printed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from statistics import median
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT.parent / "shared" / "datasets" / "rca-dev" / "nezha-tt" / "nezha-tt-2023-01-29-105016"

#: The fields that name a component, in every telemetry file and the declared topology.
NAMED = ("service", "pod", "caller", "callee", "instance", "container", "workload")
IDS = ("trace_id", "span_id", "parent_id")


def lines(path: Path) -> Iterator[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def renamer(services: set[str], copy: int) -> Callable[[Any], Any]:
    """Suffix a service name, or the service name a pod or instance name begins with."""
    ordered = sorted(services, key=len, reverse=True)

    def rename(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        for s in ordered:
            if value == s or value.startswith(s + "-"):
                return f"{s}-x{copy}{value[len(s) :]}"
        return value

    return rename


def copied(record: dict[str, Any], rename: Callable[[Any], Any], copy: int) -> dict[str, Any]:
    out = dict(record)
    for key in NAMED:
        if key in out:
            out[key] = rename(out[key])
    for key in IDS:
        if out.get(key):
            out[key] = f"{out[key]}-{copy}"
    if isinstance(out.get("labels"), dict):
        out["labels"] = {k: (rename(v) if k in NAMED else v) for k, v in out["labels"].items()}
    return out


def services_of(incident: Path) -> set[str]:
    found: set[str] = set()
    for path in incident.glob("*.jsonl*"):
        for record in lines(path):
            for source in (record, record.get("labels") or {}):
                found.update(source[k] for k in ("service", "caller", "callee") if isinstance(source.get(k), str))
    return found


def build(incident: Path, scale: int, into: Path) -> Path:
    """``scale`` copies of ``incident`` as one incident directory under ``into``."""
    target = into / f"{incident.name}-x{scale}"
    target.mkdir()
    services = services_of(incident)
    header = yaml.safe_load((incident / "incident.yaml").read_text(encoding="utf-8"))
    topology = header.get("topology") or []
    for copy in range(1, scale):
        rename = renamer(services, copy)
        edges = header.get("topology") or []
        topology = topology + [{**e, "caller": rename(e["caller"]), "callee": rename(e["callee"])} for e in edges]
    if topology:
        header["topology"] = topology
    (target / "incident.yaml").write_text(yaml.safe_dump(header, sort_keys=False), encoding="utf-8")
    for path in sorted(incident.glob("*.jsonl*")):
        name = path.name.removesuffix(".gz")
        with open(target / name, "w", encoding="utf-8") as out:
            for copy in range(scale):
                rename = renamer(services, copy)
                for record in lines(path):
                    out.write(json.dumps(copied(record, rename, copy) if copy else record) + "\n")
    return target


def timed(argv: list[str]) -> tuple[float, float]:
    """CPU seconds (user + system) and peak RSS in MiB of one child process."""
    with tempfile.TemporaryFile() as said:  # a file, not a pipe: nobody reads while the child runs
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=said)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode not in (0, 3):  # 3: ran to the end, inconclusive
            said.seek(0)
            raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {said.read().decode()[-2000:]}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("incident", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not (args.incident / "incident.yaml").is_file():
        raise SystemExit(f"{args.incident}: not a recorded incident (no incident.yaml); pass one")
    opsagent = [sys.executable, "-c", "from opsagent.cli import app; app()"]
    with tempfile.TemporaryDirectory(prefix="opsagent-scale-") as tmp:
        built = {scale: build(args.incident, scale, Path(tmp)) for scale in args.scales}
        rows: list[tuple[str, int, int, float, float]] = []
        floor = [timed([sys.executable, "-c", "pass"]) for _ in range(args.repeat)]
        rows.append(("python -c pass (floor)", 0, 0, median(c for c, _ in floor), median(m for _, m in floor)))
        for scale, path in built.items():
            spans = sum(1 for _ in lines(path / "traces.jsonl")) if (path / "traces.jsonl").exists() else 0
            runs = [timed([*opsagent, "investigate", str(path), "--json", "--no-lessons"]) for _ in range(args.repeat)]
            services = len(services_of(path))
            rows.append((f"x{scale}", services, spans, median(c for c, _ in runs), median(m for _, m in runs)))
    print(f"incident: {args.incident.name}; median of {args.repeat} runs, one process each")
    print(f"{'copies':<24}{'services':>9}{'spans':>9}{'CPU s':>8}{'peak MiB':>10}")
    for name, services, spans, cpu, peak in rows:
        print(f"{name:<24}{services or '':>9}{spans or '':>9}{cpu:>8.2f}{peak:>10.0f}")


if __name__ == "__main__":
    main()
