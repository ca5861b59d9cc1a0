"""Triggers from the terminal: what a real Alertmanager (Debian's) is firing, an alert picked from
it, and an ad-hoc question, each investigated against a real Prometheus loaded with a recorded incident."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from adapters.alertmanager.client import AlertmanagerClient
from opsagent.cli import app
from opsagent.errors import AlertError
from opsagent.fixtures import Recording, load
from opsagent.incident import open_incident
from opsagent.models import Symptom
from opsagent.triggers import ad_hoc_alert, choose, duration, matchers, moment
from tests import prometheus_server
from tests.alertmanager import Alertmanager, requires_alertmanager
from tests.conftest import ORDER_INCIDENT

runner = CliRunner()
requires_prometheus = pytest.mark.skipif(
    not prometheus_server.available(), reason="prometheus is not installed (make system-deps installs it)"
)


@pytest.fixture(scope="module")
def recording() -> Recording:
    rec, _ = load(ORDER_INCIDENT)
    return rec


@pytest.fixture(scope="module")
def alertmanager(recording: Recording, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Alertmanager]:
    with Alertmanager(tmp_path_factory.mktemp("am"), webhook_url="http://127.0.0.1:9/unused", token="t") as am:
        order = recording.alert.model_dump(mode="json", by_alias=True, exclude_none=True)
        order.pop("status", None)
        order.pop("fingerprint", None)
        order.pop("endsAt", None)
        noise = {
            "labels": {"alertname": "DiskAlmostFull", "service": "ledger-db", "severity": "warning"},
            "annotations": {"summary": "ledger-db disk 91% full"},
            "startsAt": (datetime.now(UTC) - timedelta(minutes=7)).isoformat(),
        }
        muted = {
            "labels": {"alertname": "NoisyProbe", "service": "search", "severity": "info"},
            "startsAt": (datetime.now(UTC) - timedelta(minutes=2)).isoformat(),
        }
        am.post_alerts([order, noise, muted])
        now = datetime.now(UTC)
        httpx.post(
            f"{am.url}/api/v2/silences",
            json={
                "matchers": [{"name": "alertname", "value": "NoisyProbe", "isRegex": False, "isEqual": True}],
                "startsAt": now.isoformat(),
                "endsAt": (now + timedelta(hours=1)).isoformat(),
                "createdBy": "test",
                "comment": "muted for the test",
            },
            timeout=5,
        ).raise_for_status()
        deadline = datetime.now(UTC) + timedelta(seconds=10)
        while datetime.now(UTC) < deadline:  # the silence applies once Alertmanager has processed it
            states = {
                a["labels"]["alertname"]: a["status"]["state"] for a in httpx.get(f"{am.url}/api/v2/alerts").json()
            }
            if len(states) == 3 and states.get("NoisyProbe") == "suppressed":
                break
        yield am


@pytest.fixture(scope="module")
def prometheus(recording: Recording, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with prometheus_server.prometheus(recording, tmp_path_factory.mktemp("prom")) as srv:
        yield srv.url


@pytest.fixture
def config(tmp_path: Path, prometheus: str, alertmanager: Alertmanager, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "opsagent.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "data_dir": str(tmp_path / "data"),
                "alertmanager": {"url": alertmanager.url},
                "sources": {"prometheus": [{"name": "main", "url": prometheus}]},
            }
        )
    )
    monkeypatch.setenv("OPSAGENT_CONFIG", str(path))
    return path


def _run(args: list[str]) -> Any:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# ---------------------------------------------------------------- Alertmanager


@requires_alertmanager
@requires_prometheus
@pytest.mark.usefixtures("config")
def test_alerts_lists_what_is_firing_with_alertmanagers_own_filters() -> None:
    firing = _run(["alerts", "--json"])
    assert {a["labels"]["alertname"] for a in firing} == {"OrderServiceHighLatency", "DiskAlmostFull"}
    assert all(len(a["fingerprint"]) == 16 for a in firing)
    everything = _run(["alerts", "--json", "--silenced"])
    assert {a["labels"]["alertname"] for a in everything} >= {"NoisyProbe"}
    only = _run(["alerts", "--json", "-f", "service=~order.*"])
    assert [a["labels"]["alertname"] for a in only] == ["OrderServiceHighLatency"]
    table = runner.invoke(app, ["alerts"])
    assert table.exit_code == 0 and "OrderServiceHighLatency" in table.output and "DiskAlmostFull" in table.output


@requires_alertmanager
@requires_prometheus
@pytest.mark.usefixtures("config")
def test_an_alert_picked_from_alertmanager_is_investigated_against_live_sources(recording: Recording) -> None:
    (order,) = _run(["alerts", "--json", "-f", "alertname=OrderServiceHighLatency"])
    by_fingerprint = _run(["investigate", "--alert", order["fingerprint"], "--json", "--no-lessons", "--no-live"])
    by_matcher = _run(
        ["investigate", "--from-alertmanager", "alertname=OrderServiceHighLatency", "--json", "--no-lessons"]
    )
    for report in (by_fingerprint, by_matcher):
        incident = report["incident"]
        assert incident["services"] == ["order-service"] and incident["symptom"] == "latency"
        assert datetime.fromisoformat(incident["alerted_at"]) == recording.alert.starts_at
        assert report["suspects"][0]["component"] == "order-service"
        assert "metrics:main" not in report["unreadable_sources"]
        assert any(r["hypothesis"]["component"] == "order-service" for r in report["results"])
        assert any(s["source"] == "metrics" for r in report["results"] for st in r["steps"] for s in st["evidence"])
    assert by_fingerprint["incident"]["id"] == by_matcher["incident"]["id"]  # the same alert, the same incident


@requires_alertmanager
@requires_prometheus
@pytest.mark.usefixtures("config")
def test_several_or_no_matching_alerts_is_a_clear_error_listing_them() -> None:
    several = runner.invoke(app, ["investigate", "--from-alertmanager", "severity=~page|warning", "--no-lessons"])
    assert several.exit_code == 2
    assert "2 alerts match" in several.output and "--alert FINGERPRINT" in several.output
    none = runner.invoke(app, ["investigate", "--from-alertmanager", "alertname=Nope", "--no-lessons"])
    assert none.exit_code == 2 and "nothing firing matches" in none.output
    unknown = runner.invoke(app, ["investigate", "--alert", "0123456789abcdef", "--no-lessons"])
    assert unknown.exit_code == 2 and "no alert with fingerprint 0123456789abcdef" in unknown.output


def test_an_unreachable_alertmanager_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPSAGENT_CONFIG", str(tmp_path / "none.yaml"))
    (tmp_path / "none.yaml").write_text(yaml.safe_dump({"data_dir": str(tmp_path)}))
    listed = runner.invoke(app, ["alerts", "--alertmanager", "http://127.0.0.1:9"])
    assert listed.exit_code == 3 and "alertmanager:main could not be read" in listed.output
    picked = runner.invoke(
        app, ["investigate", "--alert", "abc", "--alertmanager", "http://127.0.0.1:9", "--no-lessons"]
    )
    assert picked.exit_code == 2 and "cannot read the alert from alertmanager:main" in picked.output
    missing = runner.invoke(app, ["alerts"])
    assert missing.exit_code == 2 and "pass --alertmanager URL" in missing.output


def test_a_v2_alert_becomes_the_trigger_with_its_fingerprint_and_start() -> None:
    """The gettableAlert shape of Alertmanager's OpenAPI (api/v2/openapi.yaml), its status an object."""
    answer = [
        {
            "labels": {"alertname": "HighErrorRate", "service": "checkout"},
            "annotations": {"summary": "checkout 5xx 4%"},
            "startsAt": "2026-05-01T10:00:00.123Z",
            "endsAt": "2026-05-01T10:20:00.123Z",
            "updatedAt": "2026-05-01T10:15:00.000Z",
            "generatorURL": "http://prometheus/graph?g0.expr=x",
            "fingerprint": "a1b2c3d4e5f60718",
            "status": {"state": "active", "silencedBy": [], "inhibitedBy": []},
            "receivers": [{"name": "opsagent"}],
        }
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.params.get_list("filter") == ['alertname="HighErrorRate"']
        assert request.url.params["silenced"] == "false" and request.url.params["active"] == "true"
        return httpx.Response(200, json=answer)

    client = AlertmanagerClient(httpx.AsyncClient(base_url="http://am.test", transport=httpx.MockTransport(handler)))
    (found,) = asyncio.run(client.alerts(filters=['alertname="HighErrorRate"']))
    alert = found.alert()
    assert alert.fingerprint == "a1b2c3d4e5f60718" and alert.status == "firing"
    assert alert.starts_at == datetime(2026, 5, 1, 10, 0, 0, 123000, tzinfo=UTC)
    assert open_incident(alert).services == ("checkout",)


# ---------------------------------------------------------------- the ad-hoc question


@requires_alertmanager
@requires_prometheus
@pytest.mark.usefixtures("config")
def test_an_ad_hoc_question_is_investigated_against_live_sources(recording: Recording) -> None:
    at = recording.alert.starts_at.isoformat().replace("+00:00", "Z")
    report = _run(
        ["investigate", "--service", "order-service", "--symptom", "latency", "--at", at, "--json", "--no-lessons"]
    )
    incident = report["incident"]
    assert incident["services"] == ["order-service"] and incident["symptom"] == "latency"
    assert incident["title"] == "order-service latency (asked from the command line)"
    assert report["suspects"][0]["component"] == "order-service"
    assert any(s["source"] == "metrics" for r in report["results"] for st in r["steps"] for s in st["evidence"])


def test_the_question_fixes_the_objective_from_the_flags() -> None:
    now = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    for name in ("latency", "errors", "saturation", "availability"):
        incident = open_incident(ad_hoc_alert("checkout", Symptom(name), now=now, since=duration("30m")))
        assert incident.symptom == Symptom(name) and incident.services == ("checkout",)
        assert incident.onset == now - timedelta(minutes=30)
        assert incident.window.end == incident.onset + timedelta(minutes=30)
    at = open_incident(ad_hoc_alert("checkout", Symptom.errors, now=now, at=moment("11:15", now=now)))
    assert at.onset == datetime(2026, 6, 1, 11, 15, tzinfo=UTC)
    assert duration("1h30m") == timedelta(minutes=90) and duration("90s") == timedelta(seconds=90)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--service", "checkout"], "say what is wrong"),
        (["--service", "checkout", "--symptom", "slow"], "choose one of latency|errors|saturation|availability"),
        (["--service", "checkout", "--symptom", "latency", "--since", "soon"], "is not a duration"),
        (["--service", "checkout", "--symptom", "latency", "--at", "2026-03-01T10:00"], "give the time zone"),
        (["--service", "checkout", "--symptom", "latency", "--at", "2099-01-01T00:00:00Z"], "is in the future"),
        (["--service", "c", "--symptom", "latency", "--since", "5m", "--at", "10:00"], "not both"),
        (["--service", "checkout", "--symptom", "latency", "--at", "24:00"], "is not a time of day"),
        (["--service", "checkout", "--symptom", "latency", "--at", "14:60"], "is not a time of day"),
        (["--service", "checkout", "--symptom", "latency", "--since", "99999d"], "is too long ago"),
        (["--service", "checkout", "--symptom", "latency", "--since", "99999999999999999d"], "is too long ago"),
        (["--service", "checkout", "--symptom", "latency", "--at", "0001-01-01T00:00:00Z"], "is too long ago"),
        (["--symptom", "latency"], "go with --service"),
        ([], "give one trigger"),
        ([str(ORDER_INCIDENT), "--service", "x", "--symptom", "errors"], "give one trigger"),
    ],
)
def test_a_malformed_question_is_a_clear_error(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["investigate", *args, "--no-lessons"])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output  # one line, the problem in it


def test_matchers_are_written_the_way_alertmanager_reads_them() -> None:
    assert matchers('alertname=X, service=~"check.*"') == ['alertname="X"', 'service=~"check.*"']
    assert matchers("team!=a b") == ['team!="a b"']
    with pytest.raises(AlertError):
        matchers("no operator here")
    with pytest.raises(AlertError, match="nothing firing"):
        choose([], asked="x")
