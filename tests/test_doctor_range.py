"""`opsagent doctor` checks what a real Prometheus holds over the range an investigation reads
(around --at, or the last ninety minutes), and whether each core signal resolves for some service,
with the query to fix when it does not."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from adapters.config import live_catalog
from adapters.prometheus.config import PrometheusConfig
from opsagent.cli import app
from opsagent.doctor import CORE_SIGNALS, check, for_any_service, investigated_range
from opsagent.fixtures import Recording, SignalDef, load
from tests import prometheus_server
from tests.conftest import ORDER_INCIDENT

pytestmark = pytest.mark.skipif(
    not prometheus_server.available(), reason="prometheus is not installed (make system-deps installs it)"
)
runner = CliRunner()


@pytest.fixture(scope="module")
def recording() -> Recording:
    return load(ORDER_INCIDENT)[0]


@pytest.fixture(scope="module")
def prometheus(recording: Recording, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with prometheus_server.prometheus(recording, tmp_path_factory.mktemp("prom")) as srv:
        yield srv.url


def test_the_incidents_range_holds_its_series_and_every_core_signal_resolves(
    prometheus: str, recording: Recording
) -> None:
    onset = recording.alert.starts_at
    health = asyncio.run(
        check(PrometheusConfig(name="main", url=prometheus), span=investigated_range(onset), catalog=live_catalog())
    )
    assert health.reachable and health.problems == [], health.problems
    assert [s.signal for s in health.signals] == list(CORE_SIGNALS)
    assert all(s.resolves for s in health.signals), health.signals


def test_now_the_same_prometheus_says_it_holds_nothing_and_what_to_do(prometheus: str) -> None:
    health = asyncio.run(check(PrometheusConfig(name="main", url=prometheus), catalog=live_catalog()))
    assert health.reachable and not health.ok
    assert any("no series carry the labels triage scans by" in p for p in health.problems)
    assert any("check there with --at" in f for f in health.fixes)
    assert not any(s.resolves for s in health.signals)
    assert any("set signals.latency_p99.query:" in f for f in health.fixes)


def test_a_signal_whose_query_matches_nothing_is_named_with_its_query(prometheus: str, recording: Recording) -> None:
    wrong = {"error_ratio": SignalDef(query='http_errors_total_ratio{app="$service"}', unit="ratio")}
    health = asyncio.run(
        check(
            PrometheusConfig(name="main", url=prometheus),
            span=investigated_range(recording.alert.starts_at),
            catalog=live_catalog(wrong),
        )
    )
    by_signal = {s.signal: s for s in health.signals}
    assert by_signal["latency_p99"].resolves and not by_signal["error_ratio"].resolves
    assert health.problems == [health.problems[0]] and "error_ratio resolves for no service" in health.problems[0]
    assert 'http_errors_total_ratio{app="$service"}' in health.fixes[0]


def test_doctor_at_the_incident_is_healthy_and_now_it_exits_3(
    prometheus: str, recording: Recording, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "opsagent.yaml"
    config.write_text(yaml.safe_dump({"sources": {"prometheus": [{"name": "main", "url": prometheus}]}}))
    monkeypatch.setenv("OPSAGENT_CONFIG", str(config))
    at = recording.alert.starts_at.isoformat()
    healthy = runner.invoke(app, ["doctor", "--at", at])
    assert healthy.exit_code == 0, healthy.output
    assert "checking 2026-03-17 13:05 to 2026-03-17 14:35 UTC" in healthy.output
    assert "latency_p99" in healthy.output and "1 source(s) ok" in healthy.output
    now = runner.invoke(app, ["doctor"])
    assert now.exit_code == 3 and "resolves for no service" in now.output
    assert runner.invoke(app, ["doctor", "--at", "yesterday"]).exit_code == 2


def test_any_service_is_matched_whatever_the_matcher() -> None:
    assert for_any_service('m{service="$service"}') == 'm{service=~".+"}'
    assert for_any_service('m{job=~"(.+/)?$service"}') == 'm{job=~"(.+/)?.+"}'
    assert (
        for_any_service('m{instance="$service:9100", rcode="SERVFAIL"}') == 'm{instance=~".+:9100", rcode="SERVFAIL"}'
    )


def test_the_range_is_what_an_investigation_reads_never_past_now() -> None:
    now = datetime(2026, 3, 17, 15, 0, tzinfo=UTC)
    span = investigated_range(now - timedelta(minutes=10), now=now)
    assert (span.start, span.end) == (now - timedelta(minutes=70), now)
    assert investigated_range(now=now).start == now - timedelta(minutes=90)
