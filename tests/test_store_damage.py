"""A damaged store: a real SQLite file whose pages past the header are overwritten, or whose header
is. Every command and the service degrade to "without lessons / without history" with one clear
warning, or refuse with a clear error where the store is the whole point; `/readyz` says whether
the store can be written; nothing prints a traceback."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from opsagent.cli import app
from opsagent.service.app import create_app
from opsagent.service.payload import WebhookPayload
from opsagent.store import NotificationIn, Store
from tests.conftest import ORDER_INCIDENT, ROOT
from tests.service_support import AUTH, TOKEN, free_port, notification, settings

runner = CliRunner()


def damage(database: Path, *tables: str) -> list[int]:
    """Overwrite the pages of ``tables`` (and of their indexes) with garbage, leaving the header page
    (page 1) whole, as a torn write or a bad disk sector would; returns the pages overwritten."""
    db = sqlite3.connect(database)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        marks = ",".join("?" * len(tables))
        pages = [
            row[0]
            for row in db.execute(f"SELECT rootpage FROM sqlite_master WHERE tbl_name IN ({marks})", tables)
            if row[0] > 1
        ]
    finally:
        db.close()
    with database.open("r+b") as fh:
        for page in pages:
            fh.seek((page - 1) * page_size)
            fh.write(b"\xde\xad\xbe\xef" * (page_size // 4))
    assert pages
    return pages


def _no_traceback(*outputs: str) -> None:
    for text in outputs:
        assert "Traceback" not in text, text


def test_lessons_whose_pages_are_damaged_leave_an_investigation_without_lessons(private_data_dir: Path) -> None:
    learned = runner.invoke(app, ["replay", str(ORDER_INCIDENT), "--learn"])
    assert learned.exit_code == 0, learned.output
    database = private_data_dir / "opsagent.db"
    damage(database, "lessons")
    with database.open("rb") as fh:
        assert fh.read(16) == b"SQLite format 3\x00"  # the header is intact: the store opens, its reads fail

    result = runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "confirmed"
    assert result.stderr.count("warning:") == 1, result.stderr  # one clear warning, not one per attempt
    assert "lessons off for this run" in result.stderr and "malformed" in result.stderr

    replayed = runner.invoke(app, ["replay", str(ORDER_INCIDENT), "--lessons", "--json"])
    assert replayed.exit_code == 0, replayed.output
    assert json.loads(replayed.stdout)["ac1"] == 1.0 and "lessons off for this run" in replayed.stderr

    for command in (["lessons", "list"], ["lessons", "export"], ["lessons", "show", "x"]):
        refused = runner.invoke(app, command)
        assert refused.exit_code == 2, (command, refused.output)
        assert "malformed" in refused.output and "nothing was changed" in refused.output
        _no_traceback(refused.output)
    _no_traceback(result.output, replayed.output)


def test_feedback_on_a_damaged_history_is_a_clear_error(private_data_dir: Path) -> None:
    first = runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--json"])
    assert first.exit_code == 0
    damage(private_data_dir / "opsagent.db", "investigations")
    result = runner.invoke(app, ["feedback", ORDER_INCIDENT.name, "--correct"])
    assert result.exit_code == 2 and "malformed" in result.output
    _no_traceback(result.output)


def _filled(tmp_path: Path) -> Path:
    database = tmp_path / "data" / "opsagent.db"
    with Store(database) as store:
        for group in range(5):
            body = notification(group_key=f"group-{group}")
            payload = WebhookPayload.model_validate(body)
            summary = payload.summary()
            store.accept(
                [
                    NotificationIn(
                        group_key=payload.group_key,
                        status="firing",
                        receiver="opsagent",
                        service=summary.service,
                        alertname=summary.alertname,
                        title=summary.title,
                        payload=json.dumps(body),
                        received_at=payload.alerts[0].starts_at,
                    )
                ]
            )
    return database


def test_readiness_says_the_store_cannot_be_written_when_its_incidents_are_damaged(tmp_path: Path) -> None:
    database = _filled(tmp_path)
    service = create_app(settings(tmp_path, fixtures_dir=None), runner="thread", poll_s=0.2)
    with TestClient(service, headers=AUTH) as client:
        assert client.get("/readyz").status_code == 200
    # one job left running by a process of this host that is gone: the restart requeues it, which
    # writes to the damaged incidents (a service that cannot requeue must still start, not ready)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    db = sqlite3.connect(database)
    with db:
        owner = f"{socket.gethostname()}:{int(gone.stdout)}:gone"
        db.execute("UPDATE jobs SET status = 'running', owner = ? WHERE id = 1", (owner,))
    db.close()
    damage(database, "incidents")
    service = create_app(settings(tmp_path, fixtures_dir=None), runner="thread", poll_s=0.2)
    with TestClient(service, headers=AUTH) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 503, ready.text
        assert ready.json()["detail"] == "store not writable"  # the why is in the log, not for anyone who asks
        assert str(tmp_path) not in ready.text
        assert client.get("/healthz").status_code == 200  # alive, not ready: the orchestrator routes elsewhere
        accepted = client.post("/webhook/alertmanager", json=notification(group_key="new-group"))
        assert accepted.status_code == 503  # what readiness said: Alertmanager retries elsewhere
        assert client.get("/readyz").status_code == 503


def test_serve_on_a_store_with_a_damaged_header_says_so_once_and_exits(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "opsagent.db").write_bytes(b"\x00garbage" * 1000)
    env = {**os.environ, "OPSAGENT_DATA_DIR": str(data), "OPSAGENT_WEBHOOK_TOKEN": TOKEN}
    env.pop("OPSAGENT_CONFIG", None)
    cmd = [sys.executable, "-m", "opsagent.service", "serve", "--port", str(free_port()), "--workers", "1"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert output.count("not a readable opsagent store") == 1, output
    _no_traceback(output)
