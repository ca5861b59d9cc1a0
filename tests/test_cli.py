import json
import shutil
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
    result = runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--strategy", "beam-me-up"])
    assert result.exit_code == 2
    assert "unknown strategy 'beam-me-up'" in result.output and "hybrid" in result.output
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
    assert result.exit_code == 3, result.output  # inconclusive
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
    assert result.exit_code == 2
    assert "changes.jsonl:1 [kind]" in result.output
    ok = runner.invoke(app, ["fixtures", "validate", str(INCIDENTS)])
    assert ok.exit_code == 0 and "valid" in ok.output


def test_replay_prints_a_scoreboard_as_json() -> None:
    result = runner.invoke(app, ["replay", str(ORDER_INCIDENT), "--json"])
    assert result.exit_code == 0, result.output
    board = json.loads(result.stdout)
    assert board["ac1"] == 1.0 and board["incidents"][0]["hit1"] is True
    # the change that caused it, scored beside the service: the first change the report ranks
    assert board["change_at_1"] == 1.0 and board["with_changes"] == 1
    assert board["incidents"][0]["change_rank"] == 1


def test_replay_scoreboard_says_where_the_true_change_ranked() -> None:
    result = runner.invoke(app, ["replay", str(INCIDENTS / "cart-rollout-beside-clean-search")])
    assert result.exit_code == 0, result.output
    assert "change@1 1.000  change@3 1.000 (1)" in result.output and "#1" in result.output


# ---------------------------------------------------------------- lessons and feedback


def _learn() -> None:
    result = runner.invoke(app, ["replay", str(ORDER_INCIDENT), "--learn"])
    assert result.exit_code == 0, result.output


def test_replay_learn_then_lessons_on_uses_them() -> None:
    _learn()
    listed = runner.invoke(app, ["lessons", "list"])
    assert listed.exit_code == 0 and "db_pool_exhaustion" in listed.output
    result = runner.invoke(app, ["replay", str(ORDER_INCIDENT), "--lessons", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["incidents"][0]["steps"] == 2
    bad = runner.invoke(app, ["replay", str(ORDER_INCIDENT), "--lessons", "maybe"])
    assert bad.exit_code == 2 and "maybe" in bad.output  # --lessons is a flag, as on investigate


def test_replay_learn_meets_incidents_in_the_order_they_fired(tmp_path: Path) -> None:
    # Folder names sort the later incident first; --learn replays in the order the alerts fired, so
    # each incident learns only from those before it. Without --learn the folder order stays.
    shutil.copytree(INCIDENTS / "ledger-db-pool-exhaustion", tmp_path / "a-later")
    shutil.copytree(INCIDENTS / "ledger-projector-poison-message", tmp_path / "b-earlier")
    learned = runner.invoke(app, ["replay", str(tmp_path), "--learn", "--json"])
    assert learned.exit_code == 0, learned.output
    assert [i["slug"] for i in json.loads(learned.stdout)["incidents"]] == ["b-earlier", "a-later"]
    plain = runner.invoke(app, ["replay", str(tmp_path), "--json"])
    assert [i["slug"] for i in json.loads(plain.stdout)["incidents"]] == ["a-later", "b-earlier"]


def test_lessons_export_import_round_trip_rejects_bad_entries(tmp_path: Path) -> None:
    _learn()
    out = tmp_path / "lessons.yaml"
    assert runner.invoke(app, ["lessons", "export", "--out", str(out)]).exit_code == 0
    entries = yaml.safe_load(out.read_text())
    good = entries[0]
    no_evidence = dict(good, refuting_evidence=[])
    no_action = dict(good, next_action={"tool": "pray", "args": {}})
    out.write_text(yaml.safe_dump([no_evidence, good, no_action]))
    result = runner.invoke(app, ["lessons", "import", str(out)])
    assert result.exit_code == 2
    assert "entry 1: rejected" in result.output and "refuting_evidence" in result.output
    assert "entry 3: rejected" in result.output and "not a tool" in result.output
    assert "imported 1, rejected 2" in result.output


def test_importing_a_release_refutation_from_before_lessons_named_releases_keeps_it_and_says_it_lowers_nothing(
    tmp_path: Path,
) -> None:
    _learn()
    out = tmp_path / "lessons.yaml"
    runner.invoke(app, ["lessons", "export", "--out", str(out)])
    entry = next(e for e in yaml.safe_load(out.read_text()) if e["teaches"] == "refuted")
    old = {k: v for k, v in entry.items() if k != "releases"} | {"refuted_kind": "deploy_regression"}
    named = old | {"releases": ["order-service-7d9f8c6b5"]}
    out.write_text(yaml.safe_dump([old, named]))
    result = runner.invoke(app, ["lessons", "import", str(out)])
    assert result.exit_code == 0, result.output
    assert "entry 1: imported; it lowers nothing" in result.output and "entry 2" not in result.output
    exported = yaml.safe_load(runner.invoke(app, ["lessons", "export"]).stdout)
    kept = [e["releases"] for e in exported if e["refuted_kind"] == "deploy_regression"]
    assert sorted(kept, key=str) == [None, ["order-service-7d9f8c6b5"]]  # both kept, as two lessons


def test_lessons_list_prints_triggers_as_they_are(tmp_path: Path) -> None:
    _learn()
    out = tmp_path / "lessons.yaml"
    runner.invoke(app, ["lessons", "export", "--out", str(out)])
    entry = next(e for e in yaml.safe_load(out.read_text()) if e["teaches"] == "refuted")  # its id is its trigger
    entry["trigger"]["signals"] = ["log:new:tls", "[bold]metric[/bold]"]
    out.write_text(yaml.safe_dump([entry]))
    assert runner.invoke(app, ["lessons", "import", str(out)]).exit_code == 0
    listed = runner.invoke(app, ["lessons", "list"])
    assert "log:new:tls" in listed.output and "[bold]metric[/bold]" in listed.output  # no emoji, no markup
    assert "🆕" not in listed.output


def test_lessons_show_edit_rm(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _learn()
    lesson_id = yaml.safe_load(runner.invoke(app, ["lessons", "export"]).stdout)[0]["id"]
    shown = runner.invoke(app, ["lessons", "show", lesson_id])
    assert shown.exit_code == 0 and "next_action" in shown.output
    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\nsed -i 's/condition: .*/condition: reviewed by the team/' \"$1\"\n")
    editor.chmod(0o755)
    monkeypatch.setenv("EDITOR", str(editor))
    edited = runner.invoke(app, ["lessons", "edit", lesson_id])
    assert edited.exit_code == 0, edited.output
    assert "reviewed by the team" in runner.invoke(app, ["lessons", "show", lesson_id]).output
    breaker = tmp_path / "break.sh"
    breaker.write_text("#!/bin/sh\nsed -i 's/tool: .*/tool: rm.rf/' \"$1\"\n")
    breaker.chmod(0o755)
    monkeypatch.setenv("EDITOR", str(breaker))
    refused = runner.invoke(app, ["lessons", "edit", lesson_id])
    assert refused.exit_code == 2 and "not saved" in refused.output
    assert runner.invoke(app, ["lessons", "rm", lesson_id]).exit_code == 0
    missing = runner.invoke(app, ["lessons", "show", lesson_id])
    assert missing.exit_code == 2 and f"no lesson {lesson_id}" in missing.output


def test_feedback_wrong_with_a_root_cause_writes_a_lesson() -> None:
    result = runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--json", "--max-steps", "6"])
    assert result.exit_code == 0, result.output
    incident_id = json.loads(result.stdout)["incident"]["id"]
    right = runner.invoke(app, ["feedback", incident_id, "--correct"])
    assert right.exit_code == 0 and "was right" in right.output
    wrong = runner.invoke(app, ["feedback", incident_id, "--wrong", "--root-cause", "postgres-orders/slow_query"])
    assert wrong.exit_code == 0, wrong.output
    assert "lesson L-" in wrong.output and "config_change" in wrong.output
    # a root cause without its kind, or in prose, is refused before anything is written: the valid
    # verdict recorded above stays
    for garbled in ("postgres-orders", "it was the network", "/slow_query"):
        refused = runner.invoke(app, ["feedback", incident_id, "--wrong", "--root-cause", garbled])
        assert refused.exit_code == 2, refused.output
        assert '--root-cause must read "service/kind"' in refused.output and "Traceback" not in refused.output
    listed = runner.invoke(app, ["investigations", "list"])
    assert "postgres-orders/slow_query" in listed.output, listed.output
    unknown = runner.invoke(app, ["feedback", "inc-nope", "--correct"])
    assert unknown.exit_code == 2 and "no investigation inc-nope" in unknown.output


def test_a_lesson_that_lowered_the_real_cause_is_counted_and_stops_lowering_it() -> None:
    _learn()  # from the recorded truth: the DB pool was ruled out under these timeouts
    first = json.loads(runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--json"]).stdout)
    use = next(u for u in first["lessons_used"] if "order-service/db_pool_exhaustion" in u["lowered"])
    # the engineer says it was the pool after all: the lesson misled this investigation
    said = runner.invoke(
        app, ["feedback", first["incident"]["id"], "--wrong", "--root-cause", "order-service/db_pool_exhaustion"]
    )
    assert said.exit_code == 0 and f"counted as misleading: {use['lesson_id']}" in said.output
    exported = yaml.safe_load(runner.invoke(app, ["lessons", "export"]).stdout)
    assert {le["id"]: le["times_misled"] for le in exported}[use["lesson_id"]] == 1
    again = json.loads(runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--json"]).stdout)
    reuse = next(u for u in again["lessons_used"] if u["lesson_id"] == use["lesson_id"])
    assert reuse["lowered"] == []  # misled once, helped never: it no longer ranks, its next action still runs
    assert any("did not lower db_pool_exhaustion on order-service" in e for e in reuse["effects"])
    # the feedback taught a lesson against config_change; replayed against the truth (it was the
    # config), that lesson lowered the cause: counted as misleading, not as helping, though the
    # investigation still concluded right
    against_config = next(le["id"] for le in exported if le["refuted_kind"] == "config_change")
    assert runner.invoke(app, ["replay", str(ORDER_INCIDENT), "--lessons"]).exit_code == 0
    counts = {le["id"]: le for le in yaml.safe_load(runner.invoke(app, ["lessons", "export"]).stdout)}
    assert (counts[against_config]["times_misled"], counts[against_config]["times_helped"]) == (1, 0)


def test_a_corrupt_store_does_not_stop_an_investigation(private_data_dir: Path) -> None:
    private_data_dir.mkdir(parents=True)
    (private_data_dir / "opsagent.db").write_bytes(b"garbage" * 500)
    result = runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--json"])
    assert result.exit_code == 0
    assert "lessons off for this run" in result.stderr and "not a readable opsagent store" in result.stderr
    assert json.loads(result.stdout)["status"] == "confirmed"
    listed = runner.invoke(app, ["lessons", "list"])
    assert listed.exit_code == 2 and "not a readable opsagent store" in listed.output
