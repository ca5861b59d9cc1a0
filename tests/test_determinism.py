"""A replay is a test only if it is bit-identical across processes: no ordering may depend on the
per-process hash seed (sets of strings iterate in a different order in every process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import INCIDENTS, ROOT

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


def _reports(seed: str, dirs: list[Path]) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, *map(str, dirs)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _corpus() -> list[Path]:
    return sorted(p for p in INCIDENTS.iterdir() if (p / "incident.yaml").exists())


def test_recorded_corpus_reports_are_identical_under_two_hash_seeds() -> None:
    dirs = _corpus()
    first, second = _reports("0", dirs), _reports("4242", dirs)
    assert first.count("\n") == 2 * len(dirs)
    assert first == second


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/datasets/rca-dev is not here")
def test_real_incident_reports_are_identical_under_two_hash_seeds() -> None:
    # Real data is where ties happen: many services with the same anomaly, node series shared by pods.
    dirs = sorted(p for p in (SHARED / "changerca").iterdir() if (p / "incident.yaml").exists())
    dirs += sorted(p for p in (SHARED / "nezha-ob").iterdir() if (p / "incident.yaml").exists())[:6]
    assert _reports("0", dirs) == _reports("4242", dirs)
