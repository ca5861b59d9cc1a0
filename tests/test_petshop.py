"""The PetShop converter (benchmarks/datasets/petshop.py): fixture shape, and no leak of ``metadata``.

A tiny data set in PetShop's layout is built in ``tmp_path``; one real issue is converted too when the
shared data set is present (``../shared/datasets/petshop``).
"""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import pytest
import yaml

from benchmarks.datasets import petshop
from opsagent.fixtures import load, validate
from opsagent.pipeline import investigate_fixture
from tests.conftest import ROOT

MARKER = "INJECTED-FAULT-MARKER-7f3a"
ALERT = 1_700_000_000
REAL = ROOT.parent / "shared" / "datasets" / "petshop"


def _wide(path: Path, columns: list[tuple[str, str, str]], rows: list[tuple[float, list[float | None]]]) -> None:
    """PetShop's wide CSV: component, metric and statistic header rows, a unix_timestamp row, then data."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["microservice", *(c for c, _, _ in columns)])
        out.writerow(["metric", *(m for _, m, _ in columns)])
        out.writerow(["statistic", *(s for _, _, s in columns)])
        out.writerow(["unix_timestamp", *([""] * len(columns))])
        for ts, values in rows:
            out.writerow([ts, *("" if v is None else v for v in values)])


COLUMNS = [
    (node, metric, stat)
    for node in ("Front", "Search", "Search_lb_remote", "Store")
    for metric, stat in (("latency", "Average"), ("latency", "p99"), ("availability", "Average"), ("requests", "Sum"))
]


def _row(search_latency: float, lb_latency: float) -> list[float | None]:
    values: list[float | None] = []
    for node, metric, _ in COLUMNS:
        latency = {"Front": 0.1 + search_latency, "Search": search_latency, "Search_lb_remote": lb_latency}.get(
            node, 0.01
        )
        values.append({"latency": latency, "availability": 100.0, "requests": 500.0}[metric])
    values[-1] = None  # a missing cell stays missing
    return values


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """One scenario, one issue: Search slows down; the load balancer in front of it mirrors it."""
    root = tmp_path / "petshop"
    scenario = root / "low_traffic"
    scenario.mkdir(parents=True)
    nodes = ["Front", "Search", "Search_lb_remote", "Store"]
    calls = {("Front", "Search"), ("Front", "Search_lb_remote"), ("Search", "Store")}
    with (scenario / "graph.csv").open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["", *nodes])
        for caller in nodes:
            out.writerow([caller, *(1 if (caller, callee) in calls else 0 for callee in nodes)])
    history = [
        (ALERT - 90 * 86400 + i * 300.0, _row(0.006 + 0.0002 * (i % 5), 0.014 + 0.001 * (i % 3))) for i in range(60)
    ]
    _wide(scenario / "noissue" / "metrics.csv", COLUMNS, history)
    issue = scenario / "train" / "issue_0"
    rows = [
        (ALERT - 483.0, _row(0.0062, 0.0141)),
        (ALERT - 183.0, _row(0.0065, 0.0139)),
        (ALERT + 117.0, _row(0.0300, 0.1200)),
        (ALERT + 417.0, _row(0.0400, 0.0550)),  # complete 12 min after the alert: later than the cut
    ]
    _wide(issue / "metrics.csv", COLUMNS, rows)
    target = {
        "target": {"node": "Front", "metric": "latency", "agg": "Average", "timestamp": ALERT},
        "root_cause": {"node": "Search", "metric": None},
        "metadata": {"reproducibility": {"command": f"inject --fault {MARKER}"}, "note": MARKER},
    }
    (issue / "target.json").write_text(json.dumps(target))
    return root


def test_metadata_never_reaches_a_fixture(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    made = petshop.convert(dataset, out)
    assert len(made) == 1
    files = [p for p in out.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert MARKER not in path.read_text(), path
        assert "metadata" not in path.read_text() and "reproducibility" not in path.read_text(), path


def test_fixture_shape(dataset: Path, tmp_path: Path) -> None:
    (made,) = petshop.convert(dataset, tmp_path / "out")
    assert made.path.name == "petshop-low_traffic-train-issue_0"
    assert (made.scenario, made.split, made.metric, made.group) == ("low_traffic", "train", "latency", "low_traffic")
    assert validate(made.path) == []
    recording, truth = load(made.path)

    assert truth is not None and truth.service == "Search"
    assert recording.alert.labels["service"] == "Front"
    assert recording.alert.starts_at.timestamp() == ALERT
    # rows are callers, columns callees
    edges = {(e.caller, e.callee) for e in recording.topology}
    assert edges == {("Front", "Search"), ("Front", "Search_lb_remote"), ("Search", "Store")}
    assert all(e.source == "declared" for e in recording.topology)

    series = {(s.labels["service"], s.name): s for s in recording.metrics}
    assert all(set(s.labels) == {"__name__", "service"} for s in recording.metrics)
    assert {name for _, name in series} == {
        "latency_average_seconds",
        "latency_p99_seconds",
        "availability_percent",
        "requests_sum",
    }
    assert ("Store", "requests_sum") not in series  # its only column was empty
    search = series[("Search", "latency_average_seconds")].samples
    assert len(search) == 60 + 3  # the normal-operation history, then the issue's rows up to the cut
    assert max(t for t, _ in search) == ALERT + 117.0
    assert recording.baseline is not None and recording.baseline.end.timestamp() < ALERT - 80 * 86400
    assert recording.window.start.timestamp() == ALERT - 483.0
    assert recording.window.end.timestamp() == ALERT + 600
    assert recording.signals["availability"].direction == "down"


def test_minutes_after_moves_the_cut(dataset: Path, tmp_path: Path) -> None:
    (made,) = petshop.convert(dataset, tmp_path / "out", minutes_after=30)
    recording, _ = load(made.path)
    times = {t for s in recording.metrics for t, _ in s.samples}
    assert ALERT + 417.0 in times


def test_the_backend_outranks_the_load_balancer_that_mirrors_it(dataset: Path, tmp_path: Path) -> None:
    """Search slows; the uninstrumented load balancer in front of it (a leaf) shows the same, louder."""
    (made,) = petshop.convert(dataset, tmp_path / "out")
    report, truth = asyncio.run(investigate_fixture(made.path))
    assert truth is not None
    assert report.suspects[0].component == "Search"


@pytest.mark.skipif(not REAL.is_dir(), reason="the shared PetShop data set is not present")
def test_a_real_issue_converts_without_its_metadata(tmp_path: Path) -> None:
    issue = REAL / "low_traffic" / "train" / "issue_0"
    metadata = json.loads((issue / "target.json").read_text())["metadata"]
    made = petshop.convert_issue(issue, issue.parent.parent, tmp_path, None)
    assert validate(made.path) == []
    recording, truth = load(made.path)
    assert truth is not None and truth.service == json.loads((issue / "target.json").read_text())["root_cause"]["node"]
    assert len(recording.topology) > 30 and len({s.labels["service"] for s in recording.metrics}) > 30
    text = (made.path / "incident.yaml").read_text() + (made.path / "metrics.jsonl").read_text()
    for value in _leaves(metadata):
        assert value not in text
    assert "metadata" not in yaml.safe_load((made.path / "incident.yaml").read_text())


def _leaves(value: object) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _leaves(v)]
    if isinstance(value, list):
        return [s for v in value for s in _leaves(v)]
    return [str(value)] if isinstance(value, str) and len(str(value)) > 8 else []
