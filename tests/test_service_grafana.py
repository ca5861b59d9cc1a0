"""Grafana-managed alerting posts to ``/webhook/grafana``: the payload Grafana documents is accepted,
deduplicated and resolved like an Alertmanager group, an alert with recorded data is investigated,
and a payload missing a field Grafana always sends is a 422 naming it."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from opsagent.service.app import create_app
from tests.service_support import AUTH, notification, order_alert, settings, wait_for

# The example body of Grafana's webhook notifier documentation (payload version 1), recorded
# verbatim: https://grafana.com/docs/grafana/latest/alerting/configure-notifications/manage-contact-points/integrations/webhook-notifier/
DOCUMENTED = json.loads((Path(__file__).parent / "data" / "grafana-webhook.json").read_text())


@pytest.fixture
def app(tmp_path: Path) -> FastAPI:
    return create_app(settings(tmp_path), runner="thread", poll_s=0.2)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, headers=AUTH) as c:
        yield c


def documented() -> dict[str, Any]:
    return copy.deepcopy(DOCUMENTED)


def test_the_documented_payload_opens_one_incident_that_renotifying_updates_and_resolving_resolves(
    client: TestClient,
) -> None:
    first = client.post("/webhook/grafana", json=documented())
    assert first.status_code == 202, first.text
    assert first.json()["action"] == "opened"
    incident_id = first.json()["incident_id"]
    again = client.post("/webhook/grafana", json=documented())
    assert again.json()["action"] == "updated" and again.json()["incident_id"] == incident_id
    listed = client.get("/incidents").json()["incidents"]
    assert [(i["id"], i["alertname"]) for i in listed] == [(incident_id, "High memory usage")]
    assert listed[0]["title"] == "This alert was triggered for zone us-1"

    resolved = documented()
    resolved["status"] = "resolved"
    for alert in resolved["alerts"]:
        alert["status"] = "resolved"
        alert["endsAt"] = "2021-10-12T10:21:03Z"
    done = client.post("/webhook/grafana", json=resolved)
    assert done.json()["action"] == "resolved" and done.json()["incident_id"] == incident_id


def test_a_grafana_group_never_dedups_with_an_alertmanager_group_of_the_same_key(client: TestClient) -> None:
    grafana = client.post("/webhook/grafana", json=documented())
    alertmanager = client.post(
        "/webhook/alertmanager", json=notification(group_key=DOCUMENTED["groupKey"]), headers=AUTH
    )
    assert grafana.json()["action"] == alertmanager.json()["action"] == "opened"
    assert grafana.json()["incident_id"] != alertmanager.json()["incident_id"]


def test_a_grafana_alert_with_recorded_data_is_investigated_to_its_root_cause(client: TestClient) -> None:
    body = documented()
    alert = order_alert()
    body["alerts"] = [
        {
            **body["alerts"][0],
            "labels": alert["labels"],
            "annotations": alert["annotations"],
            "startsAt": alert["startsAt"],
        }
    ]
    body["commonLabels"] = alert["labels"]
    accepted = client.post("/webhook/grafana", json=body)
    assert accepted.status_code == 202, accepted.text

    def finished() -> dict[str, Any] | None:
        found = client.get(f"/incidents/{accepted.json()['incident_id']}").json()
        return found if found["incident"]["investigation"] in ("done", "failed") else None

    incident = wait_for(finished, timeout_s=60)["incident"]
    assert incident["investigation"] == "done"
    assert (incident["root_component"], incident["root_kind"]) == ("order-service", "config_change")


@pytest.mark.parametrize(
    ("path", "field"),
    [
        (("version",), "version"),
        (("groupKey",), "groupKey"),
        (("status",), "status"),
        (("receiver",), "receiver"),
        (("orgId",), "orgId"),
        (("alerts",), "alerts"),
        (("alerts", 0, "labels"), "alerts.0.labels"),
        (("alerts", 0, "startsAt"), "alerts.0.startsAt"),
        (("alerts", 1, "status"), "alerts.1.status"),
    ],
)
def test_a_payload_missing_a_field_is_a_422_naming_it(client: TestClient, path: tuple[Any, ...], field: str) -> None:
    body = documented()
    holder: Any = body
    for key in path[:-1]:
        holder = holder[key]
    del holder[path[-1]]
    refused = client.post("/webhook/grafana", json=body)
    assert refused.status_code == 422
    assert field in [e["field"] for e in refused.json()["errors"]], refused.json()
    assert client.get("/incidents").json()["count"] == 0


def test_an_alertmanager_payload_posted_as_grafanas_is_refused_by_its_version(client: TestClient) -> None:
    refused = client.post("/webhook/grafana", json=notification())
    assert refused.status_code == 422
    assert "version" in [e["field"] for e in refused.json()["errors"]]


def test_the_grafana_webhook_takes_the_webhooks_credentials(client: TestClient) -> None:
    assert (
        client.post("/webhook/grafana", json=documented(), headers={"Authorization": "Bearer nope"}).status_code == 401
    )


def test_the_openapi_document_describes_the_grafana_payload(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    body = schema["paths"]["/webhook/grafana"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/GrafanaPayload"}
    assert "orgId" in schema["components"]["schemas"]["GrafanaPayload"]["required"]
