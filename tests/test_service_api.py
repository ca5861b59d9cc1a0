"""The webhook service in-process: auth, limits, validation, dedup, investigation, pages, metrics."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from opsagent.errors import ConfigError
from opsagent.models import Report
from opsagent.service.app import create_app
from opsagent.service.auth import Credentials
from opsagent.service.notifier import Delivery
from opsagent.service.provider import FixtureProvider
from opsagent.settings import Settings, load_settings
from opsagent.store import IncidentRecord, StoreLocation
from tests.conftest import INCIDENTS
from tests.service_support import AUTH, TOKEN, notification, order_alert, settings, wait_for


@pytest.fixture(autouse=True)
def backend(store_location: StoreLocation) -> StoreLocation:
    """Every test here runs on both backends (the environment names the store the app opens)."""
    return store_location


@pytest.fixture
def app(tmp_path: Path) -> FastAPI:
    return create_app(settings(tmp_path), runner="thread", poll_s=0.2)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, headers=AUTH) as c:
        yield c


def post(client: TestClient, body: Any, **headers: str) -> httpx.Response:
    return client.post("/webhook/alertmanager", json=body, headers={**AUTH, **headers})


def finished(client: TestClient, incident_id: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        body = client.get(f"/incidents/{incident_id}").json()
        return body if body["incident"]["investigation"] in ("done", "failed") else None

    return wait_for(probe, timeout_s=30)


# ---------------------------------------------------------------- authentication


def test_the_webhook_refuses_callers_without_the_token(client: TestClient) -> None:
    del client.headers["Authorization"]
    body = notification()
    missing = client.post("/webhook/alertmanager", json=body)
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    wrong = client.post("/webhook/alertmanager", json=body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    basic = client.post("/webhook/alertmanager", json=body, headers={"Authorization": "Basic Zm9vOmJhcg=="})
    assert basic.status_code == 401
    assert post(client, body).status_code == 202
    # a refused caller costs no parsing: even garbage is a 401, not a 422
    assert client.post("/webhook/alertmanager", content=b"{not json").status_code == 401
    assert client.get("/incidents", headers=AUTH).json()["count"] == 1


def test_reading_incidents_pages_and_metrics_takes_credentials(tmp_path: Path) -> None:
    reader = {"Authorization": "Basic " + base64.b64encode(b"oncall:let-me-read").decode()}
    app = create_app(
        settings(tmp_path, read_username="oncall", read_password="let-me-read", read_token="scraper"), runner="thread"
    )
    with TestClient(app) as client:
        incident_id = post(client, notification()).json()["incident_id"]
        reads = ["/", "/incidents", f"/incidents/{incident_id}", f"/incidents/{incident_id}.html", "/metrics"]
        for path in reads:
            refused = client.get(path)
            assert refused.status_code == 401, path
            assert refused.headers["www-authenticate"].startswith('Basic realm="opsagent"')  # a browser asks
            assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401, path
            for credentials in (reader, {"Authorization": "Bearer scraper"}, AUTH):  # readers', or the webhook's
                assert client.get(path, headers=credentials).status_code == 200, (path, credentials)
        assert client.get("/openapi.json").status_code == 401
        assert client.get("/healthz").status_code == 200 and client.get("/readyz").status_code == 200
        # the readers' credentials do not open the webhook
        assert client.post("/webhook/alertmanager", json=notification(), headers=reader).status_code == 401
        assert (
            'opsagent_webhook_rejected_total{reason="unauthorized_read"}' in client.get("/metrics", headers=AUTH).text
        )

    public = create_app(settings(tmp_path / "public", public_reads=True), runner="thread")
    with TestClient(public) as client:
        assert client.get("/incidents").status_code == 200  # an authenticating proxy in front
        assert client.post("/webhook/alertmanager", json=notification()).status_code == 401
    with pytest.raises(ConfigError, match="OPSAGENT_READ_PASSWORD"):
        create_app(settings(tmp_path, read_username="oncall"))


def test_basic_auth_compares_user_and_password(tmp_path: Path) -> None:
    app = create_app(
        settings(tmp_path, webhook_token=None, webhook_username="am", webhook_password="pa:ss"), runner="thread"
    )

    def basic(user: str, password: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

    with TestClient(app) as client:
        url = "/webhook/alertmanager"
        assert client.post(url, json=notification(), headers=basic("am", "pa:ss")).status_code == 202
        assert client.post(url, json=notification(), headers=basic("am", "wrong")).status_code == 401
        assert client.post(url, json=notification(), headers=basic("xx", "pa:ss")).status_code == 401
        assert client.post(url, json=notification(), headers={"Authorization": "Basic !!"}).status_code == 401
        refused = client.post(url, json=notification(), headers={"Authorization": f"Bearer {TOKEN}"})
        assert refused.status_code == 401 and "Basic" in refused.headers["www-authenticate"]


def test_credentials_never_show_and_are_required() -> None:
    creds = Credentials.from_settings(Settings(webhook_token="very-secret"))
    assert "very-secret" not in repr(creds) and creds.allows("Bearer very-secret")
    assert not creds.allows("Bearer very-secreT") and not creds.allows(None) and not creds.allows("very-secret")
    with pytest.raises(ConfigError, match="needs credentials"):
        create_app(Settings())
    with pytest.raises(ConfigError, match="both"):
        Credentials.from_settings(Settings(webhook_username="am"))
    assert Credentials.from_settings(Settings(allow_unauthenticated=True)).allows(None)


def test_secrets_are_read_from_the_environment_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "opsagent.yaml"
    config.write_text("port: 9999\nwebhook_token: in-the-file\nnotify_url: https://hooks.example/T/x\n")
    monkeypatch.setenv("OPSAGENT_CONFIG", str(config))
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert "OPSAGENT_WEBHOOK_TOKEN" in str(exc.value) and "OPSAGENT_NOTIFY_URL" in str(exc.value)
    assert "in-the-file" not in str(exc.value)
    config.write_text("port: 9999\nworkers: 3\n")
    monkeypatch.setenv("OPSAGENT_WEBHOOK_TOKEN", "from-env")
    loaded = load_settings()
    assert loaded.port == 9999 and loaded.workers == 3
    assert loaded.webhook_token is not None and loaded.webhook_token.get_secret_value() == "from-env"
    assert "from-env" not in repr(loaded)


# ---------------------------------------------------------------- size and shape


def test_bodies_over_the_limit_are_refused(tmp_path: Path) -> None:
    app = create_app(settings(tmp_path, max_body_bytes=4096), runner="thread")
    big = notification(alerts=[order_alert(pad="x" * 5000)])
    with TestClient(app, headers=AUTH) as client:
        assert post(client, big).status_code == 413

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams in
            raw = json.dumps(big).encode()
            for i in range(0, len(raw), 1000):
                yield raw[i : i + 1000]

        streamed = client.post("/webhook/alertmanager", content=chunks(), headers=AUTH)
        assert streamed.status_code == 413 and "4096" in streamed.json()["detail"]
        assert post(client, notification()).status_code == 202
        assert 'opsagent_webhook_rejected_total{reason="too_large"} 2.0' in client.get("/metrics").text


MALFORMED: list[tuple[Callable[[dict[str, Any]], object], str]] = [
    (lambda b: b["alerts"][0].pop("startsAt"), "alerts.0.startsAt"),
    (lambda b: b.update(version="3"), "version"),
    (lambda b: b.update(alerts=[]), "alerts"),
    (lambda b: b.pop("groupKey"), "groupKey"),
    (lambda b: b["alerts"][0].update(labels={}), "alerts.0.labels"),
    (lambda b: b["alerts"][0].update(startsAt="yesterday"), "alerts.0.startsAt"),
    (lambda b: b.update(status="exploded"), "status"),
    (lambda b: b.update(truncatedAlerts=-1), "truncatedAlerts"),
]


def test_malformed_payloads_are_a_422_naming_the_field(client: TestClient) -> None:
    for mutate, field in MALFORMED:
        body = notification()
        mutate(body)
        response = post(client, body)
        assert response.status_code == 422, field
        assert field in [e["field"] for e in response.json()["errors"]], response.json()
        assert field in response.json()["detail"]
    assert client.get("/incidents").json()["count"] == 0
    assert 'opsagent_webhook_rejected_total{reason="invalid"} 8.0' in client.get("/metrics").text


def test_bodies_that_are_not_json_are_a_422(client: TestClient) -> None:
    for raw in (b"{not json", b"", b'{"version": "4", "groupKey": "\\ud800"}', b"\xff\xfe"):
        response = client.post("/webhook/alertmanager", content=raw, headers=AUTH)
        assert response.status_code == 422, raw
    assert client.get("/incidents").json()["count"] == 0


# ---------------------------------------------------------------- dedup, resolution, investigation


def test_a_group_is_investigated_once_then_resolved(client: TestClient) -> None:
    first = post(client, notification())
    assert first.status_code == 202 and first.json()["action"] == "opened"
    incident_id = first.json()["incident_id"]
    again = post(client, notification())  # Alertmanager re-notifies the same group
    assert again.json() == {**first.json(), "notification_id": again.json()["notification_id"], "action": "updated"}
    body = finished(client, incident_id)
    incident, report = body["incident"], body["report"]
    assert incident["investigation"] == "done" and incident["outcome"] == "confirmed"
    assert (incident["root_component"], incident["root_kind"]) == ("order-service", "config_change")
    assert incident["source"] == "fixture:order-service-threadpool-config" and incident["notifications"] == 2
    assert report["root_cause"]["kind"] == "config_change" and "observations" not in report
    assert report["incident"]["id"] == incident_id
    full = client.get(f"/incidents/{incident_id}", params={"observations": "true"}).json()["report"]
    assert full["observations"]

    resolved = post(client, notification(status="resolved"))
    assert resolved.json()["action"] == "resolved" and resolved.json()["incident_id"] == incident_id
    listed = client.get("/incidents", params={"status": "resolved"}).json()
    assert [i["id"] for i in listed["incidents"]] == [incident_id]
    assert listed["incidents"][0]["resolved_at"] is not None
    assert client.get("/incidents", params={"status": "firing"}).json()["count"] == 0

    # the group fires again later: a new incident, a new investigation
    reopened = post(client, notification())
    assert reopened.json()["action"] == "opened" and reopened.json()["incident_id"] != incident_id
    never_seen = {**order_alert(), "fingerprint": "never-seen"}  # an alert no incident has had
    assert (
        post(client, notification([never_seen], status="resolved", group_key="never-seen")).json()["action"]
        == "ignored"
    )
    metrics = client.get("/metrics").text
    assert 'opsagent_webhook_notifications_total{action="updated"} 1.0' in metrics
    assert 'opsagent_investigations_total{outcome="confirmed"} 1.0' in metrics
    assert 'opsagent_alerts_received_total{status="resolved"} 2.0' in metrics


def test_a_group_that_fires_again_after_a_lost_resolution_is_investigated_again(client: TestClient) -> None:
    alert = order_alert()
    first = post(client, notification([alert])).json()
    again = {**alert, "startsAt": (datetime.fromisoformat(alert["startsAt"]) + timedelta(days=1)).isoformat()}
    assert post(client, notification([alert, again])).json()["action"] == "updated"  # one alert still fires
    fresh = post(client, notification([again, {**again, "labels": {**again["labels"], "pod": "b"}}])).json()
    assert fresh["action"] == "updated"  # none started after the latest alert the incident has seen
    later = {**alert, "startsAt": (datetime.fromisoformat(alert["startsAt"]) + timedelta(days=2)).isoformat()}
    reopened = post(client, notification([later])).json()
    assert reopened["action"] == "opened" and reopened["incident_id"] != first["incident_id"]
    assert client.get(f"/incidents/{first['incident_id']}").json()["incident"]["state"] == "resolved"
    truncated = notification([{**later, "startsAt": "2031-01-01T00:00:00Z"}], truncatedAlerts=3)
    assert post(client, truncated).json()["action"] == "updated"  # a truncated list proves nothing


def test_the_report_page_shows_cause_charts_ruled_out_lessons_and_cost(client: TestClient) -> None:
    incident_id = post(client, notification()).json()["incident_id"]
    waiting = client.get(f"/incidents/{incident_id}.html")
    assert waiting.status_code == 200 and "text/html" in waiting.headers["content-type"]
    finished(client, incident_id)
    page = client.get(f"/incidents/{incident_id}.html").text
    for section in ("The alert's signal", "Evidence", "Timeline", "Ruled out", "Suspects", "Lessons", "Cost"):
        assert f"<h2>{section}</h2>" in page, section
    assert "config_change" in page and "db_pool_exhaustion" in page  # the cause, and what was ruled out
    assert "chg-5c1e7a2" in page  # the config push, on the timeline
    svgs = re.findall(r"<svg.*?</svg>", page, flags=re.S)
    assert len(svgs) >= 3
    assert all('class="onset"' in s and 'class="baseline"' in s and "<polyline" in s for s in svgs)
    assert any('class="change"' in s for s in svgs) and any('class="shift"' in s for s in svgs)
    assert "<script" not in page
    index = client.get("/").text
    assert f"/incidents/{incident_id}.html" in index and "order-service" in index
    assert client.get("/incidents/inc-000000000000.html").status_code == 404
    assert client.get("/incidents/inc-000000000000").status_code == 404


def test_the_service_prunes_incidents_past_their_retention(tmp_path: Path, backend: StoreLocation) -> None:
    from opsagent.store import JobOutcome, NotificationIn, Store

    long_ago = datetime.now(UTC) - timedelta(days=45)
    with Store(backend) as store:
        old = NotificationIn(
            group_key="old",
            status="firing",
            receiver="opsagent",
            service="order-service",
            alertname="HighLatency",
            title="slow",
            payload="{}",
            received_at=long_ago,
        )
        store.accept([old])
        job = store.claim_job(owner="h:1:x", now=0.0, lease_s=1e12, max_attempts=3)
        assert job is not None
        store.finish_job(job.id, owner="h:1:x", now=long_ago, outcome=JobOutcome(outcome="confirmed"))
    app = create_app(settings(tmp_path, retention_days=30), runner="thread", poll_s=0.2)
    with TestClient(app, headers=AUTH) as client:
        kept = post(client, notification()).json()["incident_id"]
        wait_for(lambda: client.get("/incidents").json()["count"] == 1 or None)
        assert [i["id"] for i in client.get("/incidents").json()["incidents"]] == [kept]


def test_incidents_filter_by_service(client: TestClient) -> None:
    post(client, notification())
    other = order_alert(service="cart-service", alertname="CartErrors")
    # a day later: an incident of its own, not part of the order-service alert's storm
    other["startsAt"] = (datetime.fromisoformat(other["startsAt"]) + timedelta(days=1)).isoformat()
    post(client, notification(alerts=[other], group_key="cart"))
    by_service = client.get("/incidents", params={"service": "cart-service"}).json()
    assert [i["service"] for i in by_service["incidents"]] == ["cart-service"]
    assert client.get("/incidents", params={"limit": 0}).status_code == 422
    assert client.get("/", params={"service": "cart-service"}).status_code == 200


def test_an_alert_without_recorded_data_is_inconclusive_and_counts_source_errors(client: TestClient) -> None:
    alert = order_alert(alertname="SomethingElse", service="billing")
    incident_id = post(client, notification(alerts=[alert], group_key="billing")).json()["incident_id"]
    body = finished(client, incident_id)
    assert body["incident"]["outcome"] == "inconclusive" and body["incident"]["source"] == "none"
    assert set(body["report"]["unreadable_sources"]) == {"metrics", "logs", "changes", "traces"}
    assert 'opsagent_source_errors_total{source="metrics"} 1.0' in client.get("/metrics").text
    assert "Sources that could not be read" in client.get(f"/incidents/{incident_id}.html").text


def test_health_readiness_and_metrics(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    text = client.get("/metrics").text
    for name in (
        "opsagent_alerts_received_total",
        "opsagent_investigations_total",
        "opsagent_investigation_duration_seconds_bucket",
        "opsagent_queue_depth",
        "opsagent_source_errors_total",
        "opsagent_webhook_accept_seconds_bucket",
    ):
        assert name in text, name


# ---------------------------------------------------------------- the provider


def test_the_fixture_provider_matches_by_label_or_by_alertname_and_service() -> None:
    provider = FixtureProvider(INCIDENTS)
    from opsagent.models import Alert

    def alert(**labels: str) -> Alert:
        return Alert.model_validate({"labels": labels, "startsAt": "2026-01-01T00:00:00Z"})

    assert provider.match(alert(alertname="OrderServiceHighLatency", service="order-service")) == (
        "order-service-threadpool-config"
    )
    assert provider.match(alert(alertname="X", opsagent_fixture="cart-memory-leak-oom")) == "cart-memory-leak-oom"
    assert provider.match(alert(alertname="X", opsagent_fixture="../../etc")) is None  # a slug, never a path
    assert provider.match(alert(alertname="OrderServiceHighLatency", service="billing")) is None
    reading = provider.reading(alert(alertname="X", opsagent_fixture="order-service-threadpool-config"))
    assert reading is not None and reading.recording is not None and reading.series is not None
    assert reading.alert.starts_at.year == 2026 and reading.sources.kinds()  # the recorded alert, its times


def test_notifications_record_the_payload_as_received(client: TestClient, backend: StoreLocation) -> None:
    body = notification(extra_field={"kept": True})
    post(client, body)
    from opsagent.store import Store

    with Store(backend) as store:
        assert store.notification_count() == 1
        record: IncidentRecord = store.incidents()[0]
        assert record.title == "order-service p99 latency 2.25s" and record.alertname == "OrderServiceHighLatency"


def test_a_store_that_cannot_be_written_is_a_503(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from opsagent.store import ServiceStore, StoreError

    async def broken(self: ServiceStore, deliveries: object, correlator: object) -> None:
        raise StoreError("disk full", where=self.where)

    monkeypatch.setattr(ServiceStore, "deliver", broken)
    response = post(client, notification())
    assert response.status_code == 503 and "retry" in response.json()["detail"]


def test_stopping_gives_running_jobs_back_without_counting_an_attempt(app: FastAPI, backend: StoreLocation) -> None:
    from opsagent.store import Store

    database = backend
    with TestClient(app, headers=AUTH) as client:
        post(client, notification())

        def running() -> bool:
            with Store(database) as store:
                return store.job_counts()["running"] == 1

        wait_for(running, timeout_s=10, every_s=0.01)
    with Store(database) as store:
        assert store.job_counts()["queued"] == 1
        job = store.claim_job(owner="h:1:t", now=0.0, lease_s=1, max_attempts=3)
        assert job is not None and job.attempts == 1


def test_a_finished_investigation_is_sent_to_the_sinks_once_with_its_report(tmp_path: Path) -> None:
    sent: list[tuple[IncidentRecord, Report | None, str]] = []

    class Recorder:
        name = "recorder"

        async def deliver(
            self, incident: IncidentRecord, report: Report | None, *, key: str, event: str, thread: str | None
        ) -> Delivery:
            sent.append((incident, report, key))
            return Delivery(outcome="sent")

        async def aclose(self) -> None:
            pass

    app = create_app(settings(tmp_path), runner="thread", poll_s=0.2, sinks=[Recorder()])
    with TestClient(app, headers=AUTH) as client:
        incident_id = post(client, notification()).json()["incident_id"]
        finished(client, incident_id)
        wait_for(lambda: sent, timeout_s=10)
    incident, report, key = sent[0]
    assert incident.id == incident_id and incident.outcome == "confirmed" and incident.root_kind == "config_change"
    assert report is not None and report.evidence  # the message can show the evidence and next step
    assert key == f"{incident_id}:investigated" and len(sent) == 1


def test_serve_registers_on_a_typer_app_and_refuses_to_start_without_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import typer
    from typer.testing import CliRunner

    from opsagent.cli.serve import register

    cli = typer.Typer()

    @cli.callback()
    def main() -> None:
        """opsagent"""

    register(cli)
    runner = CliRunner()
    shown = runner.invoke(cli, ["serve", "--help"])
    assert shown.exit_code == 0 and "--workers" in shown.output and "--fixtures" in shown.output
    for name in ("OPSAGENT_WEBHOOK_TOKEN", "OPSAGENT_WEBHOOK_PASSWORD", "OPSAGENT_ALLOW_UNAUTHENTICATED"):
        monkeypatch.delenv(name, raising=False)
    refused = runner.invoke(cli, ["serve", "--port", "0"])
    assert refused.exit_code == 2 and "needs credentials" in refused.output and "Traceback" not in refused.output
    missing = runner.invoke(cli, ["serve", "--fixtures", "/no/such/dir"], env={"OPSAGENT_WEBHOOK_TOKEN": "x"})
    assert missing.exit_code == 2 and "does not exist" in missing.output
