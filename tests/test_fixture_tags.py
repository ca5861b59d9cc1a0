"""Recorded incidents carry tags (the kind of fault, the telemetry present, the system), so replay
and the benchmarks can select slices; a tag that says something the recording does not is a
validation problem, and no tag reaches a reasoner."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from typer.testing import CliRunner

from opsagent.cli import app
from opsagent.fixtures import Recording, load, read_tags, validate
from opsagent.scoreboard import fixture_dirs, tagged_dirs
from tests.conftest import INCIDENTS

runner = CliRunner()
SMALL = INCIDENTS / "inventory-rollout-metrics-only"  # metrics and changes only: cheap to copy


def test_every_recorded_incident_is_tagged_as_it_is() -> None:
    for directory in fixture_dirs(INCIDENTS):
        tags = read_tags(directory)
        recording, truth = load(directory)
        assert tags is not None and truth is not None, directory.name
        assert tags.fault == truth.kind and tags.sources == sorted(recording.present) and tags.system


def _copy(tmp_path: Path, **tags: object) -> Path:
    copy = tmp_path / SMALL.name
    shutil.copytree(SMALL, copy)
    header = yaml.safe_load((copy / "incident.yaml").read_text(encoding="utf-8"))
    header["tags"].update(tags)
    (copy / "incident.yaml").write_text(yaml.safe_dump(header, sort_keys=False), encoding="utf-8")
    return copy


def test_a_tag_that_lies_about_the_recording_is_named(tmp_path: Path) -> None:
    problems = validate(_copy(tmp_path, sources=["changes", "metrics", "traces"], fault="dns_failure"))
    assert {p.field for p in problems} == {"tags.sources", "tags.fault"}
    assert any("traces" in p.message and "['changes', 'metrics']" in p.message for p in problems)


def test_a_fault_tag_outside_the_taxonomy_is_refused(tmp_path: Path) -> None:
    problems = validate(_copy(tmp_path, fault="gremlins"))
    assert [p.field for p in problems] == ["tags.fault"]


def test_no_tag_reaches_what_a_reasoner_sees() -> None:
    assert "tags" not in Recording.model_fields
    recording, _ = load(SMALL)
    assert "deploy_regression" not in recording.model_dump_json(exclude={"metrics", "changes"})


def test_a_slice_is_every_incident_whose_tags_all_hold() -> None:
    headers = {d.name: yaml.safe_load((d / "incident.yaml").read_text())["tags"] for d in fixture_dirs(INCIDENTS)}
    payments = sorted(n for n, t in headers.items() if t["system"] == "payments")
    assert [d.name for d in tagged_dirs(INCIDENTS, {"system": "payments"})] == payments and len(payments) >= 2
    with_traces = {n for n, t in headers.items() if "traces" in t["sources"]}
    deploys = {n for n, t in headers.items() if t["fault"] == "deploy_regression"}
    both = tagged_dirs(INCIDENTS, {"sources": "traces", "fault": "deploy_regression"})
    assert {d.name for d in both} == with_traces & deploys and 0 < len(both) < len(deploys)


def test_replay_takes_a_tag() -> None:
    result = runner.invoke(app, ["replay", str(INCIDENTS), "--tag", "sources=kubernetes", "--json"])
    assert result.exit_code == 0, result.output
    assert [s["slug"] for s in json.loads(result.stdout)["incidents"]] == ["cart-memory-limit-oomkill"]


def test_a_bad_tag_or_an_empty_slice_is_a_clear_error() -> None:
    bad = runner.invoke(app, ["replay", str(INCIDENTS), "--tag", "colour=red"])
    assert bad.exit_code == 2 and "KEY one of fault, sources, system" in bad.output
    empty = runner.invoke(app, ["replay", str(INCIDENTS), "--tag", "system=mainframe"])
    assert empty.exit_code == 2 and "no recorded incident here is tagged system=mainframe" in empty.output
    assert "Traceback" not in bad.output + empty.output
