"""Nothing leaks: a credential an upstream echoes in its error body, or a secret planted in log
lines, appears in no artifact — JSON, Markdown and HTML reports, logs, the store's rows, the
service's API answers, `opsagent doctor`, a model's requests. Credentials written in the config
file are refused by the setting's name, and never printed."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from adapters.elasticsearch.config import ElasticsearchConfig
from adapters.prometheus.config import PrometheusConfig
from adapters.sourceconfig import SourcesConfig
from opsagent.cli import app
from opsagent.logconfig import configure
from opsagent.service.app import create_app
from opsagent.settings import load_settings
from tests.conftest import ORDER_INCIDENT, ROOT
from tests.llm_support import incident_copy
from tests.service_support import AUTH, TOKEN, free_port, notification, order_alert, settings, wait_for
from tests.upstreams import echoing_upstream

runner = CliRunner()

PROMETHEUS_TOKEN = "prom-9f8e7d6c5b4a3210"
ES_API_KEY = "ZXNrZXk6c2VjcmV0LWFwaS1rZXktMTIz"


def store_text(database: Path) -> str:
    """Every row of every table of the store, as SQL text."""
    with sqlite3.connect(database) as db:
        return "\n".join(db.iterdump())


def assert_nowhere(secrets: list[str], **artifacts: str) -> None:
    for name, text in artifacts.items():
        for secret in secrets:
            assert secret not in text, f"{secret!r} leaked into {name}"


@pytest.fixture
def echo_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SourcesConfig]:
    """Prometheus and Elasticsearch behind a gateway that echoes our credentials in its errors."""
    monkeypatch.setenv("OPSAGENT_PROMETHEUS_MAIN_TOKEN", PROMETHEUS_TOKEN)
    monkeypatch.setenv("OPSAGENT_ELASTICSEARCH_LOGS_API_KEY", ES_API_KEY)
    with echoing_upstream(502) as prom, echoing_upstream(401) as es:
        sources = SourcesConfig(
            prometheus=[PrometheusConfig(name="main", url=prom, auth="bearer", timeout_s=2)],
            elasticsearch=[ElasticsearchConfig(name="logs", url=es, auth="api_key", timeout_s=2)],
        )
        config = tmp_path / "opsagent.yaml"
        config.write_text(yaml.safe_dump({"sources": sources.model_dump(mode="json", exclude_defaults=True)}))
        monkeypatch.setenv("OPSAGENT_CONFIG", str(config))
        yield sources


def _alert_file(tmp_path: Path) -> Path:
    path = tmp_path / "alert.yaml"
    path.write_text(yaml.safe_dump(yaml.safe_load((ORDER_INCIDENT / "incident.yaml").read_text())["alert"]))
    return path


def test_an_upstream_echoing_our_credentials_leaks_them_into_no_cli_artifact(
    echo_sources: SourcesConfig, tmp_path: Path, private_data_dir: Path
) -> None:
    out = tmp_path / "report.md"
    result = runner.invoke(
        app, ["--log-level", "info", "investigate", str(_alert_file(tmp_path)), "--json", "--markdown", str(out)]
    )
    assert result.exit_code == 3, result.output  # inconclusive: nothing could be read
    report = json.loads(result.stdout)
    unreadable = report["unreadable_sources"]
    # the upstreams were reached and refused: what they said is kept, the credentials are not
    assert "HTTP 502" in unreadable["metrics:main"] and "[REDACTED:" in unreadable["metrics:main"]
    assert "HTTP 401" in unreadable["logs:logs"] and "[REDACTED:" in unreadable["logs:logs"]
    assert "adapter.failed" in result.stderr  # the failures were logged, masked
    assert_nowhere(
        [PROMETHEUS_TOKEN, ES_API_KEY],
        json=result.stdout,
        markdown=out.read_text(),
        log=result.stderr,
        store=store_text(private_data_dir / "opsagent.db"),
    )
    doctor = runner.invoke(app, ["doctor"])
    assert doctor.exit_code == 3 and "HTTP 502" in doctor.output
    assert_nowhere([PROMETHEUS_TOKEN, ES_API_KEY], doctor=doctor.output)


def test_an_upstream_echoing_our_credentials_leaks_them_into_no_service_artifact(
    echo_sources: SourcesConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configure(level="info", json=True)  # as `opsagent serve` logs
    service = create_app(settings(tmp_path, fixtures_dir=None, sources=echo_sources), runner="thread", poll_s=0.2)
    with TestClient(service, headers=AUTH) as client:
        incident_id = client.post("/webhook/alertmanager", json=notification()).json()["incident_id"]

        def done() -> dict[str, Any] | None:
            body = client.get(f"/incidents/{incident_id}?observations=true").json()
            return body if body["incident"]["investigation"] in ("done", "failed") else None

        body = wait_for(done, timeout_s=60)
        assert body["incident"]["investigation"] == "done"
        assert "[REDACTED:" in body["report"]["unreadable_sources"]["metrics:main"]
        page = client.get(f"/incidents/{incident_id}.html").text
        assert "Sources that could not be read" in page
        listing = client.get("/incidents").text
    log = capsys.readouterr().err
    assert "adapter.failed" in log
    assert_nowhere(
        [PROMETHEUS_TOKEN, ES_API_KEY],
        api=json.dumps(body),
        html=page,
        listing=listing,
        log=log,
        store=store_text(tmp_path / "data" / "opsagent.db"),
    )


# ---------------------------------------------------------------- secrets in the data itself

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
BEARER = "f8Kq2LmN9pR4sT6vX1zB3cD5eF7g"
PASSWORD = "hunter2isMyPass9"
#: secrets without a digit, in a key=value, a header, a JSON body and a cookie
LETTERS_PASSWORD = "hunterLettersOnlyPw"
LETTERS_API_KEY = "hdrLettersOnlyApiKeyValue"
LETTERS_CLIENT_SECRET = "jsonLettersOnlyClientSecret"
LETTERS_COOKIE = "cookieLettersOnlySession"
PLANTED = [AWS_KEY, BEARER, PASSWORD, LETTERS_PASSWORD, LETTERS_API_KEY, LETTERS_CLIENT_SECRET, LETTERS_COOKIE]
#: in an alert's annotations, stored with the notification
ANNOTATION_PASSWORD = "annotationLettersOnlyPw"


def _planted(tmp_path: Path) -> Path:
    """The order-service incident with secrets in its log lines, where a summary shows them whole."""
    lines = [
        f"s3 upload refused for key {AWS_KEY}",
        f"calling payments with Authorization: Bearer {BEARER}",
        f"db connect failed: password={PASSWORD} user=orders",
        f"db connect failed: password={LETTERS_PASSWORD} user=orders",
        f"rejected request X-Api-Key: {LETTERS_API_KEY} from gateway",
        f'oauth token request failed body={{"client_id": "orders", "client_secret": "{LETTERS_CLIENT_SECRET}"}}',
        f"session lookup failed Cookie: sid={LETTERS_COOKIE}",
    ]
    return incident_copy(
        tmp_path / "fixtures",
        log_lines=[
            {
                "ts": f"2026-03-17T14:0{1 + i % 9}:{10 + i:02d}.000Z",
                "service": "order-service",
                "level": "ERROR",
                "message": message,
            }
            for i, message in enumerate(lines * 3)
        ],
    )


def test_secrets_in_log_lines_are_stored_and_served_redacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixture = _planted(tmp_path)
    configure(level="info", json=True)
    service = create_app(settings(tmp_path, fixtures_dir=fixture.parent), runner="thread", poll_s=0.2)
    with TestClient(service, headers=AUTH) as client:
        alert = order_alert(opsagent_fixture=fixture.name)
        alert["annotations"]["description"] = f"db login failing, password={ANNOTATION_PASSWORD} rejected"
        incident_id = client.post("/webhook/alertmanager", json=notification([alert])).json()["incident_id"]

        def done() -> dict[str, Any] | None:
            body = client.get(f"/incidents/{incident_id}?observations=true").json()
            return body if body["incident"]["investigation"] in ("done", "failed") else None

        body = wait_for(done, timeout_s=60)
        page = client.get(f"/incidents/{incident_id}.html").text
    stored = store_text(tmp_path / "data" / "opsagent.db")
    assert "db login failing, password=[REDACTED:secret] rejected" in stored  # the annotation's words stay
    observations = body["report"]["observations"]
    logs_text = "\n".join(o["text"] for o in observations if o["source"] == "logs")
    assert "[REDACTED:" in logs_text  # the planted lines were read, and masked
    assert_nowhere(
        [*PLANTED, ANNOTATION_PASSWORD],
        api=json.dumps(body),
        html=page,
        log=capsys.readouterr().err,
        store=stored,
    )


def test_secrets_in_log_lines_reach_no_cli_report_nor_the_model(tmp_path: Path, private_data_dir: Path) -> None:
    fixture = _planted(tmp_path)
    out = tmp_path / "report.md"
    result = runner.invoke(app, ["investigate", str(fixture), "--json", "--markdown", str(out)])
    assert result.exit_code == 0, result.output
    stored = store_text(private_data_dir / "opsagent.db")
    assert "[REDACTED:" in stored  # the stored report keeps its observations: the lines were read, and masked
    assert_nowhere(PLANTED, json=result.stdout, markdown=out.read_text(), store=stored)
    with_model = runner.invoke(
        app, ["investigate", str(fixture), "--json", "--reasoner", "llm", "--base-url", "fake://follow-hints"]
    )
    assert with_model.exit_code == 0, with_model.output
    transcript = json.loads(with_model.stdout)["llm"]
    assert transcript["exchanges"]  # the model was asked, and was shown none of them
    assert_nowhere(PLANTED, model_requests=json.dumps(transcript))


# ---------------------------------------------------------------- credentials in the config file


@pytest.mark.parametrize(
    ("source", "setting", "secret"),
    [
        (
            {"name": "main", "url": "http://prom:9090", "headers": {"Authorization": "Bearer abc123def456"}},
            "headers",
            "abc123def456",
        ),
        ({"name": "main", "url": "http://prom:9090", "headers": {"X-Api-Key": "k3y-abc123"}}, "headers", "k3y-abc123"),
        ({"name": "main", "url": "http://ops:pa55w0rd-xyz@prom:9090"}, "url", "pa55w0rd-xyz"),
        ({"name": "main", "url": "http://prom:9090/?access_token=t0k3n-abc"}, "url", "t0k3n-abc"),
    ],
)
def test_credentials_in_the_config_file_are_refused_by_setting_and_never_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: dict[str, Any], setting: str, secret: str
) -> None:
    config = tmp_path / "opsagent.yaml"
    config.write_text(yaml.safe_dump({"sources": {"prometheus": [source]}}))
    monkeypatch.setenv("OPSAGENT_CONFIG", str(config))
    for command in (["doctor"], ["investigate", str(_alert_file(tmp_path))]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2, result.output
        assert f"sources.prometheus.0.{setting}" in result.output and "OPSAGENT_PROMETHEUS_MAIN_" in result.output
        assert secret not in result.output and "Traceback" not in result.output
    with pytest.raises(Exception, match=setting) as refused:
        load_settings()
    assert secret not in str(refused.value)


def test_a_token_in_the_query_string_stays_out_of_the_access_log(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "OPSAGENT_DATA_DIR": str(tmp_path / "data"), "OPSAGENT_WEBHOOK_TOKEN": TOKEN}
    env.pop("OPSAGENT_CONFIG", None)
    cmd = [sys.executable, "-m", "opsagent.service", "serve", "--port", str(port), "--workers", "1", "--access-log"]
    log = tmp_path / "service.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _answers(f"{base}/healthz"), timeout_s=30)
        query = "access_token=t0k3n-abc123&limit=5&password=hunter22"
        assert httpx.get(f"{base}/incidents?{query}", headers=AUTH, timeout=5).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)  # a hang guard: beside two CPU hogs a clean stop took more than 15 s
    text = log.read_text()
    assert "GET /incidents?access_token=[REDACTED:secret]&limit=5&password=[REDACTED:secret]" in text, text
    assert "t0k3n-abc123" not in text and "hunter22" not in text


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False
