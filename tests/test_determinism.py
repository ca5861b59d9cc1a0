"""A replay is a test only if it is bit-identical across processes: no ordering may depend on the
per-process hash seed (sets of strings iterate in a different order in every process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HANG_GUARD_S, INCIDENTS, ROOT

SHARED = ROOT.parent / "shared" / "datasets" / "rca-dev"

#: Investigates every incident directory given, under both strategies, and prints each report as
#: JSON without the wall times (the only field a machine may legitimately change).
_SCRIPT = """
import asyncio, json, sys
from pathlib import Path
from opsagent.logconfig import configure
from opsagent.pipeline import investigate_fixture

configure(level="error")

async def main():
    for path in sys.argv[1:]:
        for strategy in ("hybrid", "react"):
            report, _ = await investigate_fixture(Path(path), strategy_name=strategy)
            data = report.model_dump(mode="json")
            data["cost"].pop("wall_ms")
            print(json.dumps(data, sort_keys=True))

asyncio.run(main())
"""


def _reports(*seeds: str, dirs: list[Path]) -> list[str]:
    """Each seed's reports, the processes run side by side."""
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", _SCRIPT, *map(str, dirs)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in seeds
    ]
    outputs = []
    for run in runs:
        stdout, stderr = run.communicate()
        assert run.returncode == 0, stderr[-2000:]
        outputs.append(stdout)
    return outputs


def _corpus() -> list[Path]:
    return sorted(p for p in INCIDENTS.iterdir() if (p / "incident.yaml").exists())


@pytest.mark.timeout(HANG_GUARD_S)
def test_recorded_corpus_reports_are_identical_under_two_hash_seeds() -> None:
    dirs = _corpus()
    first, second = _reports("0", "4242", dirs=dirs)
    assert first.count("\n") == 2 * len(dirs)
    assert first == second


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/datasets/rca-dev is not here")
@pytest.mark.timeout(HANG_GUARD_S)
def test_real_incident_reports_are_identical_under_two_hash_seeds() -> None:
    # Real data is where ties happen: many services with the same anomaly, node series shared by pods.
    dirs = sorted(p for p in (SHARED / "changerca").iterdir() if (p / "incident.yaml").exists())
    dirs += sorted(p for p in (SHARED / "nezha-ob").iterdir() if (p / "incident.yaml").exists())[:6]
    first, second = _reports("0", "4242", dirs=dirs)
    assert first == second
