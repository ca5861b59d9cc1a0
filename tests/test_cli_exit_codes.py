"""The exit codes the README documents (opsagent.cli.common.ExitCode): 0 a cause concluded or all
good, 1 opsagent failed or a result could not be written, 2 bad input, 3 it ran to the end without
the answer. And `investigations list|show`, whose ids `feedback` takes."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from opsagent.cli import app
from opsagent.cli.common import ExitCode
from opsagent.models import REPORT_SCHEMA_VERSION
from opsagent.report import json_schema
from tests.conftest import INCIDENTS, ORDER_INCIDENT, ROOT

runner = CliRunner()
INCONCLUSIVE = INCIDENTS / "shipping-quota-429"


def test_the_exit_code_says_how_the_investigation_ended(tmp_path: Path) -> None:
    concluded = runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--json", "--no-lessons"])
    assert concluded.exit_code == ExitCode.OK == 0
    assert json.loads(concluded.stdout)["status"] == "confirmed"
    inconclusive = runner.invoke(app, ["investigate", str(INCONCLUSIVE), "--json", "--no-lessons"])
    assert inconclusive.exit_code == ExitCode.INCONCLUSIVE == 3
    assert json.loads(inconclusive.stdout)["status"] == "inconclusive"
    bad = runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--k", "0"])
    assert bad.exit_code == ExitCode.BAD_INPUT == 2 and "must be positive" in bad.output
    full = runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--no-lessons", "--markdown", "/dev/full"])
    assert full.exit_code == ExitCode.INTERNAL == 1 and "CONFIRMED" in full.stdout  # printed all the same


def test_a_recorded_incidents_header_is_replayed_not_investigated_live() -> None:
    result = runner.invoke(app, ["investigate", str(ORDER_INCIDENT / "incident.yaml"), "--json", "--no-lessons"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["status"] == "confirmed" and report["unreadable_sources"] == {}
    assert "replaying the recorded incident" in result.stderr


def test_validate_and_lessons_import_call_bad_input_bad_input(tmp_path: Path) -> None:
    broken = tmp_path / "inc"
    broken.mkdir()
    (broken / "incident.yaml").write_text("alert: {labels: {}}\n")
    assert runner.invoke(app, ["fixtures", "validate", str(broken)]).exit_code == 2
    assert runner.invoke(app, ["fixtures", "validate", str(ORDER_INCIDENT)]).exit_code == 0
    lessons = tmp_path / "lessons.yaml"
    lessons.write_text("- {}\n")
    assert runner.invoke(app, ["lessons", "import", str(lessons)]).exit_code == 2


def test_investigations_list_and_show_what_feedback_takes() -> None:
    assert runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--no-live"]).exit_code == 0
    assert runner.invoke(app, ["investigate", str(INCONCLUSIVE), "--no-live"]).exit_code == 3
    listed = runner.invoke(app, ["investigations", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {r["incident_id"]: r for r in json.loads(listed.stdout)}
    assert rows["order-service-threadpool-config"]["root_kind"] == "config_change"
    assert rows["order-service-threadpool-config"]["title"] == "order-service p99 latency 2.25s"
    assert rows["shipping-quota-429"]["status"] == "inconclusive"
    table = runner.invoke(app, ["investigations", "list"])
    assert "order-service-threadpool-config" in table.output and "config_change on order-service" in table.output
    shown = runner.invoke(app, ["investigations", "show", "order-service-threadpool-config"])
    assert shown.exit_code == 0 and "CONFIRMED: config_change on order-service" in shown.output
    assert "opsagent feedback order-service-threadpool-config --correct" in shown.output
    assert runner.invoke(app, ["investigations", "show", "shipping-quota-429", "--json"]).exit_code == 3
    said = runner.invoke(app, ["feedback", "order-service-threadpool-config", "--correct"])
    assert said.exit_code == 0, said.output
    again = json.loads(runner.invoke(app, ["investigations", "list", "--json"]).stdout)
    assert next(r for r in again if r["incident_id"] == "order-service-threadpool-config")["feedback"] == "correct"
    unknown = runner.invoke(app, ["investigations", "show", "inc-nope"])
    assert unknown.exit_code == 2 and "opsagent investigations list" in unknown.output


def test_the_json_report_is_versioned_and_valid_against_its_committed_schema() -> None:
    committed = json.loads((ROOT / "opsagent" / "data" / "report.schema.json").read_text())
    assert committed == json_schema(), (
        "stale: run opsagent investigations schema --out opsagent/data/report.schema.json"
    )
    printed = runner.invoke(app, ["investigations", "schema"])
    assert printed.exit_code == 0 and json.loads(printed.stdout) == committed
    for incident in (ORDER_INCIDENT, INCONCLUSIVE):
        result = runner.invoke(app, ["investigate", str(incident), "--json", "--no-lessons"])
        report = json.loads(result.stdout)
        assert report["schema_version"] == REPORT_SCHEMA_VERSION
        jsonschema.validate(report, committed)
    with pytest.raises(jsonschema.ValidationError, match="maybe"):  # the schema refuses a status no report has
        jsonschema.validate(dict(report, status="maybe"), committed)
