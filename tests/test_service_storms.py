"""Alert storms at the webhook (``correlation.enabled``): the recorded storm's alerts, posted one
group at a time or in one notification, make one incident whose investigation explains each of
them, while the unrelated alert of the same minutes stays an incident of its own; alerts with no
service, with clocks hours apart, or thousands a minute are handled with bounded state."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi import FastAPI
from fastapi.testclient import TestClient

from opsagent.service.app import create_app
from opsagent.store import Store
from tests.conftest import INCIDENTS
from tests.service_support import AUTH, notification, settings, wait_for

STORM = yaml.safe_load((INCIDENTS / "inventory-db-alert-storm" / "incident.yaml").read_text())
LEAD = STORM["alert"]
OTHERS = {a["labels"]["alertname"]: a for a in STORM["alerts"]}
JOINED = STORM["truth"]["joined"]
(APART,) = STORM["truth"]["apart"]


def group_of(alert: dict[str, Any]) -> str:
    """Alertmanager's usual grouping, by alertname: each alert of the storm is a group of its own."""
    return f'{{}}:{{alertname="{alert["labels"]["alertname"]}"}}'


def alone(alert: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return notification([copy.deepcopy(alert)], group_key=group_of(alert), **extra)


def shifted(alert: dict[str, Any], by: timedelta, **labels: str) -> dict[str, Any]:
    moved = copy.deepcopy(alert)
    moved["startsAt"] = (datetime.fromisoformat(alert["startsAt"].replace("Z", "+00:00")) + by).isoformat()
    moved["labels"].update(labels)
    moved["fingerprint"] = f"{alert['fingerprint']}-{by.total_seconds():g}-{len(labels)}"
    return moved


def web_app(tmp_path: Path, **correlation: Any) -> FastAPI:
    """Accepts and serves pages, runs no investigation: what is decided at the webhook alone.
    Correlation is on by default."""
    return create_app(settings(tmp_path, correlation=correlation), role="web")


@pytest.fixture
def web(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(web_app(tmp_path), headers=AUTH) as client:
        yield client


def post(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post("/webhook/alertmanager", json=body)
    assert answer.status_code == 202, answer.text
    return dict(answer.json())


def finished(client: TestClient, incident_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        body = client.get(f"/incidents/{incident_id}").json()
        return body if body["report"] is not None else None

    return wait_for(done, timeout_s=120)


def test_the_storm_posted_one_group_at_a_time_is_one_incident_and_its_investigation_explains_every_alert(
    tmp_path: Path,
) -> None:
    with TestClient(web_app(tmp_path), headers=AUTH) as web:
        first = post(web, alone(LEAD))
        assert first["action"] == "opened"
        for name in JOINED:
            joined = post(web, alone(OTHERS[name]))
            assert (joined["action"], joined["incident_id"]) == ("updated", first["incident_id"]), name
        apart = post(web, alone(OTHERS[APART]))
        assert apart["action"] == "opened" and apart["incident_id"] != first["incident_id"]
        # a re-notification of a joined group still goes to the storm's incident
        again = post(web, alone(OTHERS[JOINED[0]]))
        assert (again["action"], again["incident_id"]) == ("updated", first["incident_id"])
        listed = {i["id"]: i for i in web.get("/incidents").json()["incidents"]}
        assert set(listed) == {first["incident_id"], apart["incident_id"]}
        assert listed[first["incident_id"]]["notifications"] == 1 + len(JOINED) + 1
    # a worker takes the queued job later: it reads the alerts that joined since, with the first
    worker = create_app(settings(tmp_path), runner="thread", poll_s=0.2)
    with TestClient(worker, headers=AUTH) as client:
        body = finished(client, first["incident_id"])
    report = body["report"]
    assert report["root_cause"]["component"] == STORM["truth"]["service"]
    assert report["incident"]["services"] == ["cart-service", "inventory-service", "order-service"]
    explained = {a["alert"]["alertname"]: a for a in report["alerts"]}
    assert set(explained) == {LEAD["labels"]["alertname"], *JOINED}
    assert all(a["cause"] == "postgres-inventory/slow_query" for a in explained.values())
    assert APART not in explained


def test_the_storm_in_one_notification_is_split_from_the_unrelated_alert_and_the_page_lists_the_alerts(
    tmp_path: Path,
) -> None:
    app = create_app(settings(tmp_path), runner="thread", poll_s=0.2)
    together = notification(
        [copy.deepcopy(a) for a in (LEAD, *OTHERS.values())], group_key='{}:{severity=~"page|warning"}'
    )
    with TestClient(app, headers=AUTH) as client:
        answer = post(client, together)
        assert answer["action"] == "opened" and len(answer["incident_ids"]) == 2
        listed = {i["alertname"]: i for i in client.get("/incidents").json()["incidents"]}
        apart, storm = listed.pop(APART), listed.popitem()[1]
        assert not listed and storm["service"] != "backup-agent" and apart["service"] == "backup-agent"
        assert answer["incident_id"] == answer["incident_ids"][0] and set(answer["incident_ids"]) == {
            storm["id"],
            apart["id"],
        }
        report = finished(client, storm["id"])["report"]
        page = client.get(f"/incidents/{storm['id']}.html").text
        again = post(client, together)
    assert again["incident_ids"] == answer["incident_ids"] and again["action"] == "updated"
    # investigated from the alert the recording knows, every other alert of the storm beside it
    assert [a["alert"]["alertname"] for a in report["alerts"]] == [
        LEAD["labels"]["alertname"],
        *sorted(JOINED, key=lambda n: OTHERS[n]["startsAt"]),
    ]
    assert [a["cause"] for a in report["alerts"]] == ["postgres-inventory/slow_query"] * 3
    assert f"Alerts joined ({1 + len(JOINED)})" in page
    assert all(name in page for name in JOINED) and APART not in page


def test_the_storm_resolves_with_its_last_alert_not_its_first(web: TestClient) -> None:
    storm = post(web, alone(LEAD))["incident_id"]
    post(web, alone(OTHERS[JOINED[0]]))
    first_ends = post(web, alone(LEAD, status="resolved"))
    assert (first_ends["action"], first_ends["incident_id"]) == ("updated", storm)
    assert web.get(f"/incidents/{storm}").json()["incident"]["state"] == "firing"
    last_ends = post(web, alone(OTHERS[JOINED[0]], status="resolved"))
    assert (last_ends["action"], last_ends["incident_id"]) == ("resolved", storm)
    assert web.get("/incidents?status=firing").json()["count"] == 0


def test_alerts_that_name_no_service_or_whose_clocks_are_hours_apart_stay_incidents_of_their_own(
    web: TestClient,
) -> None:
    storm = post(web, alone(LEAD))["incident_id"]
    nameless = {"labels": {"alertname": "Watchdog"}, "startsAt": LEAD["startsAt"], "status": "firing"}
    assert post(web, alone(nameless))["incident_id"] != storm
    for skew in (timedelta(hours=5), -timedelta(hours=5)):
        skewed = shifted(OTHERS[JOINED[0]], skew)
        answer = post(web, notification([skewed], group_key=f"skewed{skew}"))
        assert answer["action"] == "opened" and answer["incident_id"] != storm
    assert web.get("/incidents").json()["count"] == 4
    no_labels = notification([{**LEAD, "labels": {}}], group_key="no-labels")
    refused = web.post("/webhook/alertmanager", json=no_labels)
    assert refused.status_code == 422 and "alerts.0.labels" in refused.json()["detail"]


def test_thousands_of_alerts_in_a_minute_make_one_incident_and_the_correlator_stays_capped(tmp_path: Path) -> None:
    app = web_app(tmp_path, max_members=16, max_storms=8)
    services = ["cart-service", "inventory-service", "order-service"]
    with TestClient(app, headers=AUTH) as web:
        storm = post(web, alone(LEAD))["incident_id"]
        for batch in range(40):
            alerts = [
                shifted(LEAD, timedelta(seconds=(batch * 50 + i) * 60 / 2000), service=services[i % 3], pod=f"p{i}")
                for i in range(50)
            ]
            answer = post(web, notification(alerts, group_key=f"pods-{batch}"))
            assert answer["incident_ids"] == [storm], batch
        listed = web.get("/incidents").json()
    assert listed["count"] == 1 and listed["incidents"][0]["notifications"] == 41
    with Store(tmp_path / "data" / "opsagent.db") as store:
        (held,) = store.storms()
        fingerprints = store.storm_fingerprints()
    assert len(held.storm.members) == 16 and held.storm.count == 2001 and fingerprints == 8 * 16


def test_with_correlation_turned_off_each_alert_group_is_an_incident_of_its_own(tmp_path: Path) -> None:
    with TestClient(web_app(tmp_path, enabled=False), headers=AUTH) as web:
        answers = [post(web, alone(a)) for a in (LEAD, *OTHERS.values())]
        assert [a["action"] for a in answers] == ["opened"] * (1 + len(OTHERS))
        assert all(a["incident_ids"] == [] for a in answers)  # no storms: the field stays empty
        assert web.get("/incidents").json()["count"] == 1 + len(OTHERS)


def test_alerts_of_one_group_that_name_nothing_to_correlate_by_stay_one_incident(web: TestClient) -> None:
    nameless = [
        {"labels": {"alertname": name, "team": "blue"}, "startsAt": LEAD["startsAt"], "status": "firing"}
        for name in ("DiskAlmostFull", "HighMemory")
    ]
    answer = post(web, notification(nameless, group_key="{}:{team=blue}"))
    assert answer["action"] == "opened" and answer["incident_ids"] == [answer["incident_id"]]
    assert web.get("/incidents").json()["count"] == 1
