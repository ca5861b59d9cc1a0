"""The metrics scan alone: a recorded incident loaded once, then its replay metrics source's scan (the
peers' noise and every group's statistics) timed in CPU seconds, ``--repeat`` times in one process.

    python benchmarks/scan_bench.py [INCIDENT] [--copies 16] [--repeat 3]

INCIDENT is a recorded-incident directory (default: the TrainTicket incident ``scale_bench.py``
copies, read in place); ``--copies N`` builds N copies of it side by side first, as
``scale_bench.py`` does, in a temporary directory removed afterwards. The incident is opened as a
replay opens it before onset is refined (the alert's start). To compare two trees, run this script
from each in turn with ``PYTHONPATH`` set to the tree: it uses only what both have.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_bench import DEFAULT, build

from opsagent.fixtures import load
from opsagent.incident import open_incident
from opsagent.plan import replay_catalog
from opsagent.sources.replay import ReplayMetrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("incident", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--copies", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not (args.incident / "incident.yaml").exists():
        sys.exit(f"not a recorded incident: {args.incident}")
    gc.set_threshold(100_000, 50, 100)  # as a command runs (opsagent.cli.common)
    with tempfile.TemporaryDirectory() as tmp:
        directory = build(args.incident, args.copies, Path(tmp)) if args.copies > 1 else args.incident
        recording, _ = load(directory)
    if not recording.metrics:
        sys.exit(f"no metrics recorded: {args.incident}")
    incident = open_incident(recording.alert, window=recording.window, baseline=recording.baseline)
    metrics = ReplayMetrics(recording, replay_catalog(recording))
    print(f"{directory.name}: {len(recording.metrics)} series")
    for _ in range(args.repeat):
        start = time.process_time()
        stats = asyncio.run(metrics.scan(incident=incident))
        took = time.process_time() - start
        digest = hashlib.sha256("".join(s.model_dump_json() for s in stats).encode()).hexdigest()[:12]
        print(f"scan: {len(stats)} groups, {took:.3f} s CPU, statistics {digest}")


if __name__ == "__main__":
    main()
