"""End to end: a real Alertmanager posts to the service under test, with bearer auth.

Alerts go to Alertmanager's own API (as Prometheus sends them); Alertmanager groups them and calls
the webhook; the service investigates against the order-service recorded incident in a worker
process and serves the report. A second alert in the same group makes Alertmanager notify the group
again: the incident is updated, not investigated twice. Ending the alerts sends ``resolved``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from opsagent.service.app import create_app
from opsagent.store import Store, StoreLocation
from tests.alertmanager import Alertmanager, requires_alertmanager
from tests.service_support import AUTH, TOKEN, serving, settings, wait_for


def alert(pod: str, *, ends: datetime | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "labels": {"alertname": "OrderServiceHighLatency", "service": "order-service", "severity": "page", "pod": pod},
        "annotations": {"summary": "order-service p99 latency 2.25s"},
        "startsAt": (datetime.now(UTC) - timedelta(minutes=3)).isoformat(),
        "generatorURL": "http://prometheus.test:9090/graph",
    }
    if ends is not None:
        body["endsAt"] = ends.isoformat()
    return body


@requires_alertmanager
def test_alertmanager_notifications_are_investigated_once_and_resolved(
    tmp_path: Path, store_location: StoreLocation
) -> None:
    config = settings(tmp_path)
    assert config.store.url == store_location.url
    app = create_app(config, runner="process", poll_s=0.2)
    with serving(app) as base, httpx.Client(base_url=base, timeout=10, headers=AUTH) as api:
        hook = f"{base}/webhook/alertmanager"
        with Alertmanager(tmp_path / "am", webhook_url=hook, token=TOKEN) as am:
            am.post_alerts([alert("order-service-7d9f-1")])

            def opened() -> dict[str, Any] | None:
                found = api.get("/incidents").json()["incidents"]
                return found[0] if found else None

            incident = wait_for(opened, timeout_s=20)
            assert incident["service"] == "order-service" and incident["receiver"] == "opsagent"

            def investigated() -> dict[str, Any] | None:
                body = api.get(f"/incidents/{incident['id']}").json()
                return body if body["incident"]["investigation"] in ("done", "failed") else None

            done = wait_for(investigated, timeout_s=60)
            assert done["incident"]["outcome"] == "confirmed", done["incident"]
            assert done["report"]["root_cause"]["component"] == "order-service"
            assert done["report"]["root_cause"]["kind"] == "config_change"
            assert done["incident"]["source"] == "fixture:order-service-threadpool-config"  # by alertname+service
            page = api.get(f"/incidents/{incident['id']}.html")
            assert page.status_code == 200 and "config_change" in page.text and "<svg" in page.text

            # a second alert joins the group: Alertmanager notifies the whole group again
            am.post_alerts([alert("order-service-7d9f-1"), alert("order-service-7d9f-2")])
            wait_for(lambda: api.get(f"/incidents/{incident['id']}").json()["incident"]["notifications"] >= 2)

            # the alerts end: Alertmanager sends the group as resolved
            ended = datetime.now(UTC) - timedelta(seconds=1)
            am.post_alerts([alert("order-service-7d9f-1", ends=ended), alert("order-service-7d9f-2", ends=ended)])
            resolved = wait_for(
                lambda: (i := api.get(f"/incidents/{incident['id']}").json()["incident"])["state"] == "resolved" and i,
                timeout_s=20,
            )
            assert resolved["resolved_at"] is not None

        listed = api.get("/incidents").json()
        assert listed["count"] == 1  # one group, one incident
        metrics = api.get("/metrics").text
        assert 'opsagent_investigations_total{outcome="confirmed"} 1.0' in metrics
        assert 'opsagent_webhook_notifications_total{action="opened"} 1.0' in metrics
        assert 'opsagent_webhook_notifications_total{action="resolved"} 1.0' in metrics
        assert 'opsagent_webhook_rejected_total{reason="unauthorized"} 0.0' in metrics
    with Store(config.store) as store:
        jobs = store.job_counts()
        assert sum(jobs.values()) == 1 and jobs["done"] == 1  # the re-notification started no investigation
        assert store.notification_count() >= 3
