"""The webhook service reading live sources from its settings: a real Prometheus (Debian's),
loaded with the order-service incident's metrics, and one that is not there."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adapters.prometheus.config import PrometheusConfig
from adapters.sourceconfig import SourcesConfig
from opsagent.fixtures import load
from opsagent.service.app import create_app
from opsagent.service.provider import FirstMatch, FixtureProvider, LiveProvider, NoSources, provider_for
from tests.conftest import ORDER_INCIDENT
from tests.prometheus_server import available, free_port, prometheus
from tests.service_support import AUTH, notification, settings, wait_for


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not available():
        pytest.skip("Debian's prometheus/promtool are not installed")
    recording, _ = load(ORDER_INCIDENT)
    with prometheus(recording, tmp_path_factory.mktemp("prometheus")) as server:
        yield server.url


def _live(tmp_path: Path, url: str) -> TestClient:
    sources = SourcesConfig(prometheus=[PrometheusConfig(name="main", url=url)])
    app = create_app(settings(tmp_path, fixtures_dir=None, sources=sources), runner="thread", poll_s=0.2)
    return TestClient(app, headers=AUTH)


def _investigated(client: TestClient) -> dict[str, Any]:
    accepted = client.post("/webhook/alertmanager", json=notification(), headers=AUTH)
    assert accepted.status_code == 202
    incident_id = accepted.json()["incident_id"]

    def probe() -> dict[str, Any] | None:
        body = client.get(f"/incidents/{incident_id}").json()
        return body if body["incident"]["investigation"] in ("done", "failed") else None

    return wait_for(probe, timeout_s=60)


def test_alerts_are_investigated_against_the_configured_prometheus(prometheus_url: str, tmp_path: Path) -> None:
    with _live(tmp_path, prometheus_url) as client:
        body = _investigated(client)
        incident, report = body["incident"], body["report"]
        assert incident["investigation"] == "done" and incident["source"] == "live"
        assert "metrics" not in report["unreadable_sources"]  # read from Prometheus
        assert set(report["unreadable_sources"]) == {"logs", "changes", "traces"}  # none configured
        assert report["suspects"][0]["component"] == "order-service"
        page = client.get(f"/incidents/{incident['id']}.html").text
        assert "<polyline" in page  # the alert's series, read back from Prometheus for the chart


def test_a_dead_prometheus_is_named_and_the_investigation_still_ends(tmp_path: Path) -> None:
    with _live(tmp_path, f"http://127.0.0.1:{free_port()}") as client:
        body = _investigated(client)
        assert body["incident"]["investigation"] == "done"
        assert body["incident"]["outcome"] == "inconclusive"
        unreadable = body["report"]["unreadable_sources"]
        assert "Connection refused" in unreadable["metrics:main"]  # which instance, and why
        assert 'opsagent_source_errors_total{source="metrics:main"} 1.0' in client.get("/metrics").text


def test_the_provider_follows_the_settings(tmp_path: Path) -> None:
    sources = SourcesConfig(prometheus=[PrometheusConfig(name="main", url="http://127.0.0.1:9")])
    assert isinstance(provider_for(settings(tmp_path, fixtures_dir=None)), NoSources)
    assert isinstance(provider_for(settings(tmp_path)), FixtureProvider)
    assert isinstance(provider_for(settings(tmp_path, fixtures_dir=None, sources=sources)), LiveProvider)
    both = provider_for(settings(tmp_path, sources=sources))
    assert isinstance(both, FirstMatch) and both.name == "fixtures+live"
    copy = pickle.loads(pickle.dumps(both))  # it travels to the worker processes
    assert [p.name for p in copy.providers] == ["fixtures", "live"]
