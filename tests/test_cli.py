import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from opsagent.cli import app
from tests.conftest import INCIDENTS, ORDER_INCIDENT

runner = CliRunner()


def test_investigate_prints_a_json_report() -> None:
    result = runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["root_cause"]["kind"] == "config_change"
    assert report["cost"]["tool_calls"] > 0
    assert "truth" not in result.stdout


def test_investigate_renders_for_a_terminal_and_writes_markdown(tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    result = runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--no-live", "--markdown", str(out)])
    assert result.exit_code == 0, result.output
    assert "CONFIRMED: config_change on order-service" in result.output
    assert "Ruled out" in out.read_text()


def test_unknown_strategy_is_a_clear_error() -> None:
    result = runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--strategy", "mcts"])
    assert result.exit_code == 2
    assert "unknown strategy 'mcts'" in result.output and "hybrid" in result.output
    assert "Traceback" not in result.output


def test_malformed_fixture_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "incident.yaml").write_text("alert: {labels: {}}\nwindow: nonsense\n")
    result = runner.invoke(app, ["investigate", str(tmp_path)])
    assert result.exit_code == 2
    assert "incident.yaml" in result.output and "[window]" in result.output
    assert "Traceback" not in result.output


def test_malformed_alert_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "alert.yaml"
    path.write_text(yaml.safe_dump({"labels": {"alertname": "X"}, "startsAt": "not a time"}))
    result = runner.invoke(app, ["investigate", str(path)])
    assert result.exit_code == 2 and "[startsAt]" in result.output


def test_alert_file_without_sources_names_every_unreadable_source(tmp_path: Path) -> None:
    path = tmp_path / "webhook.json"
    alert = yaml.safe_load((ORDER_INCIDENT / "incident.yaml").read_text())["alert"]
    path.write_text(json.dumps({"version": "4", "status": "firing", "alerts": [alert]}))
    result = runner.invoke(app, ["investigate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["status"] == "inconclusive"
    assert set(report["unreadable_sources"]) == {"metrics", "logs", "changes", "traces"}


def test_broken_playbook_is_named(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("id: x\nkind: gc_pause\n")
    result = runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--playbooks", str(tmp_path)])
    assert result.exit_code == 2 and "bad.yaml" in result.output and "[checks]" in result.output


def test_fixtures_validate_reports_file_line_field(tmp_path: Path) -> None:
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "incident.yaml").write_text((ORDER_INCIDENT / "incident.yaml").read_text())
    (inc / "changes.jsonl").write_text(
        '{"id": "c", "ts": "2026-01-01T00:00:00Z", "service": "a", "kind": "yolo", "summary": "s"}\n'
    )
    result = runner.invoke(app, ["fixtures", "validate", str(inc)])
    assert result.exit_code == 1
    assert "changes.jsonl:1 [kind]" in result.output
    ok = runner.invoke(app, ["fixtures", "validate", str(INCIDENTS)])
    assert ok.exit_code == 0 and "valid" in ok.output


def test_replay_prints_a_scoreboard_as_json() -> None:
    result = runner.invoke(app, ["replay", str(ORDER_INCIDENT), "--json"])
    assert result.exit_code == 0, result.output
    board = json.loads(result.stdout)
    assert board["ac1"] == 1.0 and board["incidents"][0]["hit1"] is True
