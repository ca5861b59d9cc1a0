"""Input validation at every boundary: non-finite numbers, impossible dates and counts, files that
are not UTF-8, bodies that are not JSON, output paths that cannot be written (checked before the
investigation runs), and clients that disconnect or stall mid-body: each gets a clear message and
the right exit code or status, and no traceback reaches the user or the log."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from opsagent.cli import app
from opsagent.service.app import create_app
from tests.conftest import INCIDENTS, ORDER_INCIDENT, ROOT
from tests.service_support import AUTH, TOKEN, free_port, notification, order_alert, settings, wait_for

runner = CliRunner()


def _clean(*outputs: str) -> None:
    for text in outputs:
        assert "Traceback" not in text, text


def _alert() -> dict[str, object]:
    alert: dict[str, object] = yaml.safe_load((ORDER_INCIDENT / "incident.yaml").read_text())["alert"]
    return alert


# ---------------------------------------------------------------- files that are not UTF-8


def test_an_alert_file_that_is_not_utf8_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "alert.yaml"
    path.write_bytes(yaml.safe_dump(_alert()).encode() + b"\nnote: caf\xe9\n")  # Latin-1, not UTF-8
    result = runner.invoke(app, ["investigate", str(path)])
    assert result.exit_code == 2 and "not UTF-8" in result.output and "alert.yaml" in result.output
    _clean(result.output)


def test_a_recorded_incident_that_is_not_utf8_is_named_by_file_and_line(tmp_path: Path) -> None:
    header = tmp_path / "bad-header"
    shutil.copytree(ORDER_INCIDENT, header)
    (header / "incident.yaml").write_bytes((header / "incident.yaml").read_bytes() + b"\n# r\xe9sum\xe9\n")
    for command in (["investigate", str(header)], ["fixtures", "validate", str(header)]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2 and "incident.yaml" in result.output and "not UTF-8" in result.output
        _clean(result.output)
    lines = tmp_path / "bad-line"
    shutil.copytree(ORDER_INCIDENT, lines)
    logs = gzip.decompress((lines / "logs.jsonl.gz").read_bytes()).splitlines()
    logs.insert(2, b'{"ts": "2026-03-17T14:00:00Z", "service": "x", "level": "info", "message": "caf\xe9"}')
    (lines / "logs.jsonl.gz").write_bytes(gzip.compress(b"\n".join(logs) + b"\n"))
    result = runner.invoke(app, ["fixtures", "validate", str(lines)])
    assert result.exit_code == 2 and "logs.jsonl.gz:3" in result.output and "not UTF-8" in result.output
    _clean(result.output)


def test_a_config_file_that_is_not_utf8_or_not_settings_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "opsagent.yaml"
    monkeypatch.setenv("OPSAGENT_CONFIG", str(config))
    for content, said in ((b"lessons_top_k: 3 # caf\xe9\n", "not UTF-8"), (b"- a\n- b\n", "a mapping of settings")):
        config.write_bytes(content)
        result = runner.invoke(app, ["doctor"])
        assert result.exit_code == 2 and said in result.output, result.output
        _clean(result.output)


# ---------------------------------------------------------------- output paths


def test_an_output_path_that_cannot_be_written_is_refused_before_the_investigation(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for target, said in (
        (tmp_path, "is a directory"),
        (tmp_path / "missing" / "report.md", "cannot be written"),
        (a_file / "report.md", "cannot be written"),
    ):
        started = time.monotonic()
        result = runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--json", "--markdown", str(target)])
        assert result.exit_code == 2 and said in result.output, result.output
        assert result.stdout == "" and time.monotonic() - started < 2  # refused first: nothing was investigated
        _clean(result.output)
    assert not (tmp_path / "missing").exists()


def test_a_report_whose_markdown_cannot_be_written_after_all_is_still_printed() -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this machine")
    result = runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--json", "--markdown", "/dev/full"])
    assert result.exit_code == 1 and "--markdown /dev/full" in result.stderr  # the disk is full
    assert json.loads(result.stdout)["status"] == "confirmed"  # its result is not lost
    _clean(result.output)


# ---------------------------------------------------------------- numbers, dates, counts


@pytest.mark.parametrize("option", [["--wall-s", "nan"], ["--wall-s", "inf"], ["--timeout", "nan"], ["--wall-s", "-1"]])
def test_budgets_must_be_finite_positive_numbers(option: list[str]) -> None:
    result = runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--json", *option])
    assert result.exit_code == 2 and "must be positive" in result.output and result.stdout == ""
    _clean(result.output)


def test_a_nan_metric_sample_is_refused_at_load_with_its_line(tmp_path: Path) -> None:
    fixture = tmp_path / "nan"
    shutil.copytree(ORDER_INCIDENT, fixture)
    metrics = next(p for p in fixture.iterdir() if p.name.startswith("metrics"))
    opener = gzip.open if metrics.suffix == ".gz" else open
    with opener(metrics, "rt", encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    first = json.loads(lines[0])
    first["samples"][1][1] = "NaN"
    lines[0] = json.dumps(first).replace('"NaN"', "NaN")  # as Python's json writes a NaN
    with opener(metrics, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    validated = runner.invoke(app, ["fixtures", "validate", str(fixture)])
    assert validated.exit_code == 2 and f"{metrics.name}:1 [samples.1.1]" in validated.output
    assert "finite" in validated.output
    investigated = runner.invoke(app, ["investigate", str(fixture)])
    assert investigated.exit_code == 2 and "finite" in investigated.output
    _clean(validated.output, investigated.output)


@pytest.mark.parametrize("year", ["9999", "0001"])
def test_impossible_alert_times_are_refused(tmp_path: Path, year: str) -> None:
    alert = {**_alert(), "startsAt": f"{year}-03-17T14:02:00Z"}
    path = tmp_path / "alert.yaml"
    path.write_text(yaml.safe_dump(alert))
    result = runner.invoke(app, ["investigate", str(path)])
    assert result.exit_code == 2 and "[startsAt]" in result.output and "not a possible time" in result.output
    _clean(result.output)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(settings(tmp_path), runner="thread", poll_s=0.2), headers=AUTH) as c:
        yield c


def test_the_webhook_refuses_impossible_counts_and_times_and_bodies_that_are_not_json(client: TestClient) -> None:
    body = json.dumps(notification())
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "text/plain; charset=utf-8"):
        refused = client.post("/webhook/alertmanager", content=body, headers={"content-type": content_type})
        assert refused.status_code == 415, content_type
        assert "application/json" in refused.json()["detail"]
    huge = body.replace('"truncatedAlerts": 0', '"truncatedAlerts": 1' + "0" * 400)
    refused = client.post("/webhook/alertmanager", content=huge, headers={"content-type": "application/json"})
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "truncatedAlerts"
    for year in ("9999", "0001"):
        late = {**order_alert(), "startsAt": f"{year}-01-01T00:00:00Z"}
        refused = client.post("/webhook/alertmanager", json=notification([late]))
        assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "alerts.0.startsAt"
    not_ended = {**order_alert(), "endsAt": "0001-01-01T00:00:00Z"}  # Alertmanager's "has not ended"
    assert client.post("/webhook/alertmanager", json=notification([not_ended])).status_code == 202
    assert client.get("/incidents").json()["count"] == 1
    metrics = client.get("/metrics").text
    assert 'opsagent_webhook_rejected_total{reason="media_type"} 3.0' in metrics


# ---------------------------------------------------------------- clients that give up or stall


def _raw_post(port: int, *, declared: int, sent: bytes) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port))
    head = (
        f"POST /webhook/alertmanager HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
    )
    conn.sendall(head.encode() + sent)
    return conn


def test_clients_that_disconnect_or_stall_mid_body_cost_one_log_line_each(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "OPSAGENT_DATA_DIR": str(tmp_path / "data"), "OPSAGENT_WEBHOOK_TOKEN": TOKEN}
    env |= {"OPSAGENT_BODY_TIMEOUT_S": "1"}
    env.pop("OPSAGENT_CONFIG", None)
    cmd = [sys.executable, "-m", "opsagent.service", "serve", "--port", str(port), "--workers", "1"]
    cmd += ["--fixtures", str(INCIDENTS), "--log-level", "info"]
    log = tmp_path / "service.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(f"{base}/healthz"), timeout_s=30)
        body = json.dumps(notification()).encode()
        for _ in range(3):  # half a body, then gone
            conn = _raw_post(port, declared=len(body), sent=body[: len(body) // 2])
            time.sleep(0.1)
            conn.close()
        stalled = _raw_post(port, declared=len(body), sent=body[:100])
        stalled.settimeout(10)
        answer = stalled.recv(4096).decode()
        stalled.close()
        assert answer.startswith("HTTP/1.1 408"), answer
        assert httpx.post(f"{base}/webhook/alertmanager", json=notification(), headers=AUTH).status_code == 202
        wait_for(lambda: log.read_text().count("webhook.client_disconnected") == 3, timeout_s=10)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    text = log.read_text()
    _clean(text)
    assert text.count('"event": "webhook.client_disconnected"') == 3, text
    assert text.count('"event": "webhook.body_timeout"') == 1, text


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_markup_in_an_alert_is_shown_as_text_on_the_pages(client: TestClient) -> None:
    hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    alert = {**order_alert(service=hostile), "annotations": {"summary": hostile}}
    incident_id = client.post("/webhook/alertmanager", json=notification([alert])).json()["incident_id"]
    for page in (client.get(f"/incidents/{incident_id}.html").text, client.get("/").text):
        assert "<script>alert" not in page and "<img src=x" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
