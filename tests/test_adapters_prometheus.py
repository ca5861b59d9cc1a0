"""The Prometheus adapter against a real Prometheus (Debian's), loaded with a recorded incident.

Parity: for the same incident, the live source and the replay source give the same observations.
The tolerance is none: with the step at the recording's resolution (60 s) and each point read as
the last sample of its step, Prometheus returns exactly the recorded samples.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
import yaml

from adapters.changes_git.config import GitConfig, PathRule
from adapters.config import live_catalog
from adapters.prometheus.config import PrometheusConfig
from adapters.prometheus.reader import PrometheusReader, prometheus_client, sampled, step_for
from adapters.sourceconfig import SourcesConfig
from opsagent.catalog import SignalCatalog, default_catalog
from opsagent.doctor import check
from opsagent.errors import AnswerTooLarge, QueryRejected, SourceAuthFailed, SourceUnavailable
from opsagent.fixtures import MetricSeries, Recording, load, validate
from opsagent.incident import open_incident
from opsagent.loop import Budget
from opsagent.models import Action, ErrorData, Incident, MetricsData
from opsagent.pipeline import investigate, investigate_fixture
from opsagent.plan import Planner, Reading, load_default_playbooks
from opsagent.record import record_incident
from opsagent.sources import Sources
from opsagent.sources.live import LiveMetrics
from opsagent.sources.replay import replay_sources
from opsagent.tools import Toolbox
from tests.conftest import ORDER_INCIDENT
from tests.prometheus_server import BASIC_PASSWORD, BASIC_USER, available, free_port, prometheus
from tests.upstreams import huge_upstream

pytestmark = pytest.mark.skipif(not available(), reason="Debian's prometheus/promtool are not installed")

#: The read endpoints of the HTTP API (https://prometheus.io/docs/prometheus/latest/querying/api/).
READ_ENDPOINTS = {
    "/api/v1/query",
    "/api/v1/query_range",
    "/api/v1/series",
    "/api/v1/labels",
    "/api/v1/status/buildinfo",
}


@pytest.fixture(scope="module")
def recording() -> Recording:
    rec, _ = load(ORDER_INCIDENT)
    return rec


@pytest.fixture(scope="module")
def server(recording: Recording, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with prometheus(recording, tmp_path_factory.mktemp("prometheus")) as srv:
        yield srv.url


@pytest.fixture(scope="module")
def catalog(recording: Recording) -> SignalCatalog:
    return default_catalog().merged(recording.signals)


def _incident(rec: Recording) -> Incident:
    return open_incident(rec.alert, window=rec.window, baseline=rec.baseline, id=rec.slug)


class Calls:
    """Every request the client sends, as (method, path)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, response: requests.Response, *args: object, **kwargs: object) -> None:
        self.seen.append((response.request.method or "", requests.utils.urlparse(response.request.url).path))


def _reader(url: str, calls: Calls | None = None, **kw: object) -> PrometheusReader:
    client = prometheus_client(url, **kw)  # type: ignore[arg-type]
    if calls is not None:
        client._session.hooks["response"].insert(0, calls)
    return PrometheusReader(client, name="test")


def test_step_keeps_range_queries_under_300_points() -> None:
    assert step_for(0, 92 * 60, max_points=300, min_step_s=60) == 60
    day = step_for(0, 24 * 3600, max_points=300, min_step_s=60)
    assert day == 300 and 24 * 3600 / day + 1 <= 300
    assert step_for(0, 3600, max_points=300, min_step_s=15) == 15
    assert sampled('up{job="x"}', 60) == ('last_over_time(up{job="x"}[59999ms])', "up")
    assert sampled("sum(rate(x[5m]))", 60) == ("sum(rate(x[5m]))", None)


def test_live_signals_match_replay_exactly(server: str, recording: Recording, catalog: SignalCatalog) -> None:
    incident = _incident(recording)
    replay = replay_sources(recording, catalog).metrics
    assert replay is not None
    calls = Calls()
    live = LiveMetrics(_reader(server, calls), catalog=catalog)
    services = ["order-service", "payment-service", "postgres-orders", "inventory-service", "redis-cache"]

    async def compare() -> int:
        compared = 0
        for signal, spec in catalog.signals.items():
            for service in services:
                query = catalog.query(signal, service)
                args = {"query": query, "signal": signal, "component": service, "spec": spec, "incident": incident}
                want = await replay.stats(**args)  # type: ignore[arg-type]
                got = await live.stats(**args)  # type: ignore[arg-type]
                assert got == want, (signal, service)
                compared += want is not None
        return compared

    assert asyncio.run(compare()) > 30
    assert {path for _, path in calls.seen} <= READ_ENDPOINTS
    assert {method for method, _ in calls.seen} == {"GET"}


def test_live_scan_matches_replay_scan(server: str, recording: Recording, catalog: SignalCatalog) -> None:
    incident = _incident(recording)
    replay = replay_sources(recording, catalog).metrics
    assert replay is not None
    calls = Calls()
    live = LiveMetrics(_reader(server, calls), catalog=catalog)
    want = asyncio.run(replay.scan(incident=incident))
    got = asyncio.run(live.scan(incident=incident))
    assert len(got) == len(want) == len(recording.metrics)
    assert sorted(got, key=lambda s: s.query) == sorted(want, key=lambda s: s.query)
    assert {path for _, path in calls.seen} <= READ_ENDPOINTS


def test_investigation_over_live_metrics_concludes_as_replay(
    server: str, recording: Recording, catalog: SignalCatalog
) -> None:
    books = load_default_playbooks()
    replayed = replay_sources(recording, catalog)

    async def run(metrics: object) -> list[tuple[str, str]]:
        sources = Sources(metrics=metrics, logs=replayed.logs, changes=replayed.changes, traces=replayed.traces)  # type: ignore[arg-type]
        reading = Reading(
            name="live",
            alert=recording.alert,
            sources=sources,
            catalog=catalog,
            topology=recording.topology,
            recording=recording,
        )
        report = await investigate(Planner(playbooks=tuple(books)).plan(reading), now=recording.window.end)
        return [(s.component, s.kind) for s in report.suspects[:3]]

    live = LiveMetrics(_reader(server), catalog=catalog)
    assert asyncio.run(run(live)) == asyncio.run(run(replayed.metrics))


def test_every_live_catalog_query_is_valid_promql(server: str, recording: Recording) -> None:
    catalog = live_catalog()
    reader = _reader(server)
    incident = _incident(recording)
    start, end = incident.window.start.timestamp(), incident.window.end.timestamp()

    async def run_all() -> dict[str, int]:
        answered = {}
        for signal, spec in catalog.signals.items():
            series = await reader.series(query=catalog.query(signal, "order-service"), start=start, end=end)
            answered[signal] = len(series)
            if spec.limit:
                await reader.series(query=spec.limit.replace("$service", "order-service"), start=start, end=end)
        return answered

    answered = asyncio.run(run_all())
    # The recorded names come last in each `or` chain: a Prometheus holding a recording still answers.
    assert answered["latency_p99"] == answered["threadpool_active"] == answered["cpu_usage"] == 1


def test_live_catalog_reads_the_recording_like_replay(
    server: str, recording: Recording, catalog: SignalCatalog
) -> None:
    incident = _incident(recording)
    replay = replay_sources(recording, catalog).metrics
    assert replay is not None
    live_cat = live_catalog()
    live = LiveMetrics(_reader(server), catalog=live_cat)
    for signal in ("latency_p99", "threadpool_active", "db_connections_used", "error_ratio"):
        spec = live_cat.get(signal)
        assert spec is not None
        got = asyncio.run(
            live.stats(
                query=live_cat.query(signal, "order-service"),
                signal=signal,
                component="order-service",
                spec=spec,
                incident=incident,
            )
        )
        want = asyncio.run(
            replay.stats(
                query=catalog.query(signal, "order-service"),
                signal=signal,
                component="order-service",
                spec=catalog.signals[signal],
                incident=incident,
            )
        )
        assert got is not None and want is not None
        # Pods are aggregated by the server here, so the series count differs; the values do not.
        assert got.direction == want.direction, signal
        assert got.window_max == pytest.approx(want.window_max, rel=1e-9), signal
        if want.limit_fraction is None:
            assert got.limit_fraction is None, signal
        else:
            assert got.limit_fraction == pytest.approx(want.limit_fraction, rel=1e-9), signal


def test_wrong_promql_is_rejected_with_the_servers_reason(
    server: str, recording: Recording, catalog: SignalCatalog
) -> None:
    reader = _reader(server)
    with pytest.raises(QueryRejected) as caught:
        asyncio.run(reader.series(query="sum(rate(http_requests_total[5m]", start=0, end=600))
    assert "HTTP 400" in str(caught.value) and "bad_data" in str(caught.value)
    assert caught.value.query == "sum(rate(http_requests_total[5m]" and caught.value.window is not None

    toolbox = Toolbox(
        sources=Sources(metrics=LiveMetrics(reader, catalog=catalog)), catalog=catalog, incident=_incident(recording)
    )
    obs = asyncio.run(
        toolbox.call(Action(tool="metrics.query", args={"query": "rate(x[5m]", "service": "order-service"}))
    )
    assert isinstance(obs.data, ErrorData) and "bad_data" in obs.data.error and obs.data.hint
    assert toolbox.unreadable == {}  # a bad query is the caller's to fix, not a dead source


def test_auth_failure_and_success(recording: Recording, tmp_path: Path) -> None:
    with prometheus(recording, tmp_path, basic_auth=True) as srv:
        with pytest.raises(SourceAuthFailed) as caught:
            asyncio.run(_reader(srv.url).series(query="up", start=0, end=600))
        assert "HTTP 401" in str(caught.value)
        with pytest.raises(SourceAuthFailed):
            asyncio.run(_reader(srv.url, username=BASIC_USER, password="wrong").series(query="up", start=0, end=600))
        good = _reader(srv.url, username=BASIC_USER, password=BASIC_PASSWORD)
        incident = _incident(recording)
        start, end = incident.window.start.timestamp(), incident.window.end.timestamp()
        found = asyncio.run(good.series(query='executor_active_threads{service="order-service"}', start=start, end=end))
        assert found and found[0].samples


def test_dead_server_is_unavailable_and_the_investigation_goes_on(recording: Recording, catalog: SignalCatalog) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    reader = _reader(dead)
    with pytest.raises(SourceUnavailable) as caught:
        asyncio.run(reader.series(query="up", start=0, end=600))
    assert caught.value.source == "metrics:test"

    replayed = replay_sources(recording, catalog)
    sources = Sources(
        metrics=LiveMetrics(reader, catalog=catalog),
        logs=replayed.logs,
        changes=replayed.changes,
        traces=replayed.traces,
    )
    report = asyncio.run(
        investigate(
            Planner.shipped().plan(
                Reading(name="live", alert=recording.alert, sources=sources, catalog=catalog, recording=recording)
            ),
            now=recording.window.end,
        )
    )
    assert "metrics:test" in report.unreadable_sources
    assert report.suspects  # the other sources still localise
    assert all(not (o.source == "metrics" and isinstance(o.data, MetricsData)) for o in report.observations)


def test_doctor_reports_version_and_latency(server: str, recording: Recording) -> None:
    at = recording.window.end  # the loaded data's time, not today
    health = asyncio.run(check(PrometheusConfig(name="main", url=server), now=at))
    assert health.ok and health.version and health.version.startswith("2.42.0") and health.latency_ms is not None
    blind = asyncio.run(check(PrometheusConfig(name="main", url=server, scan_match=['{team!=""}']), now=at))
    assert blind.reachable and "no series carry the labels" in blind.problems[0]


def _gitops(repo: Path) -> Path:
    def git(*args: str, when: str | None = None) -> None:
        env = {"GIT_AUTHOR_NAME": "Dana", "GIT_AUTHOR_EMAIL": "dana@example.com", "GIT_COMMITTER_NAME": "Dana"}
        env |= {"GIT_COMMITTER_EMAIL": "dana@example.com", "PATH": os.environ["PATH"]}
        if when:
            env |= {"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)

    repo.mkdir()
    git("init", "-q", "-b", "main")
    config = repo / "apps" / "order-service" / "application.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("executor:\n  max-threads: 32\n")
    git("add", "-A")
    git("commit", "-q", "-m", "initial", when="2026-03-10T10:00:00Z")
    config.write_text("executor:\n  max-threads: 4\n")
    git("add", "-A")
    git("commit", "-q", "-m", "Tune executor; rotate db password=hunter2", when="2026-03-17T13:58:00Z")
    return repo


def test_record_writes_a_recorded_incident_that_replays(server: str, recording: Recording, tmp_path: Path) -> None:
    token = "tok-9f8e7d6c5b4a"
    alert = recording.alert.model_copy(
        update={"annotations": {**recording.alert.annotations, "runbook": f"https://wiki/x?access_token={token}"}}
    )
    config = SourcesConfig(
        prometheus=[PrometheusConfig(name="main", url=server, auth="bearer")],
        git=[
            GitConfig(name="gitops", path=_gitops(tmp_path / "gitops"), rules=[PathRule(pattern="apps/{service}/**")])
        ],
    )
    out = tmp_path / "recorded"
    report, problems = asyncio.run(
        record_incident(
            alert,
            out=out,
            sources_config=config,
            signals={},
            playbooks=load_default_playbooks(),
            budget=Budget(),
            environ={"OPSAGENT_PROMETHEUS_MAIN_TOKEN": token},
        )
    )
    assert problems == [] and validate(out) == []
    assert set(report.unreadable_sources) == {"logs", "traces"}  # not configured here
    assert sorted(p.name for p in out.iterdir()) == ["changes.jsonl", "incident.yaml", "metrics.jsonl"]
    text = "".join(p.read_text() for p in out.iterdir())
    assert token not in text and "hunter2" not in text and "[REDACTED:" in text
    header = yaml.safe_load((out / "incident.yaml").read_text())
    # Live PromQL answers are kept under their signal, and the recording says how to read them back.
    assert header["signals"]["latency_p99"] == {"query": 'opsagent:latency_p99{service="$service"}'}
    assert header["signals"]["threadpool_active"]["limit"] == 'opsagent:threadpool_active_limit{service="$service"}'
    replayed, _ = asyncio.run(investigate_fixture(out, playbooks=load_default_playbooks()))
    assert replayed.suspects and replayed.incident.window == report.incident.window
    changes = [json.loads(line) for line in (out / "changes.jsonl").read_text().splitlines()]
    assert changes[0]["service"] == "order-service" and "+  max-threads: 4" in changes[0]["diff"]


@pytest.fixture(scope="module")
def rollout_recording() -> Recording:
    from tests.conftest import INCIDENTS

    rec, _ = load(INCIDENTS / "inventory-rollout-metrics-only")
    return rec


def test_live_version_comparison_matches_replay_with_pods_named_by_the_rollout(
    rollout_recording: Recording, tmp_path: Path
) -> None:
    # The series carry pod names but no version: only the rollout's record says which pod runs which.
    from opsagent.analysis.changes import change_records

    incident = _incident(rollout_recording)
    catalog = default_catalog().merged(rollout_recording.signals)
    (rollout,) = [
        c
        for c in change_records(rollout_recording.changes, incident=incident, service=None, before_min=60).changes
        if c.service == "inventory-service"
    ]
    replay = replay_sources(rollout_recording, catalog).metrics
    assert replay is not None
    with prometheus(rollout_recording, tmp_path) as srv:
        live = LiveMetrics(_reader(srv.url), catalog=catalog)
        got = asyncio.run(live.versions(incident=incident, service="inventory-service", rollout=rollout))
    want = asyncio.run(replay.versions(incident=incident, service="inventory-service", rollout=rollout))
    assert got == want and got.verdict == "worse" and got.new_pods


def test_an_answer_of_200_mb_is_stopped_at_the_size_cap() -> None:
    with huge_upstream() as (url, handler), pytest.raises(AnswerTooLarge) as caught:
        asyncio.run(_reader(url).series(query="up", start=0, end=600))
    assert caught.value.source == "metrics:test" and "passed 33,554,432 bytes" in str(caught.value)
    assert handler.sent < 200 * (1 << 20)  # the client hung up long before the end


def test_live_version_comparison_asks_the_callers_calls_as_the_replay_does(
    rollout_recording: Recording, tmp_path: Path
) -> None:
    # A clean new version of payment-service while order-service, which calls it, fails every request
    # from the minute the new version serves: the live source must fetch the calls into and out of
    # order-service (two selector queries) and reach the replay's verdict.
    from opsagent.analysis.changes import change_records
    from opsagent.fixtures import MetricSeries, unix

    incident = _incident(rollout_recording)
    (rollout,) = [
        c
        for c in change_records(rollout_recording.changes, incident=incident, service=None, before_min=60).changes
        if c.service == "payment-service"
    ]
    start, end = int(unix(rollout_recording.window.start)), int(unix(rollout_recording.window.end))
    serving = int(unix(rollout.steps[0].ts)) + 60
    minutes = range(start, end, 60)

    def series(labels: dict[str, str], value: Callable[[int], float], since: int = start) -> MetricSeries:
        return MetricSeries.model_validate(
            {
                "labels": {"__name__": "edge_success_rate_percent", **labels},
                "samples": [[t, value(t)] for t in minutes if t >= since],
            }
        )

    pods = {v: names for v, names in rollout.pods.items()}
    new_pod = pods[rollout.to_version][0]
    metrics = [
        series(
            {
                "caller": "order-service",
                "callee": "payment-service",
                "side": "destination",
                "pod": p,
                "service": "payment-service",
            },
            lambda t: 100.0,
        )
        for p in pods[rollout.from_version]
    ]
    metrics.append(
        series(
            {
                "caller": "order-service",
                "callee": "payment-service",
                "side": "destination",
                "pod": new_pod,
                "service": "payment-service",
            },
            lambda t: 100.0,
            since=serving,
        )
    )
    metrics.append(
        series(
            {"caller": "api-gateway", "callee": "order-service", "side": "destination"},
            lambda t: 100.0 if t < serving else 20.0,
        )
    )
    metrics.append(
        series({"caller": "order-service", "callee": "user-service", "side": "destination"}, lambda t: 100.0)
    )
    recording = rollout_recording.model_copy(update={"metrics": metrics, "signals": {}})
    catalog = default_catalog()
    replay = replay_sources(recording, catalog).metrics
    assert replay is not None
    want = asyncio.run(replay.versions(incident=incident, service="payment-service", rollout=rollout))
    assert want.verdict == "unknown" and "order-service, which calls payment-service, began failing" in want.reason
    with prometheus(recording, tmp_path) as srv:
        live = LiveMetrics(_reader(srv.url), catalog=catalog)
        got = asyncio.run(live.versions(incident=incident, service="payment-service", rollout=rollout))
    assert got == want


def test_live_scan_pairs_both_ends_of_a_call_edge_as_the_replay_does(
    recording: Recording, catalog: SignalCatalog, tmp_path: Path
) -> None:
    # One edge measured at both ends, a minute apart from the recording's start: the callee's time
    # wanders, the caller's view is the same plus the wire, 0.3 s more of it from onset on.
    start, end = recording.window.start.timestamp(), recording.window.end.timestamp()
    onset = recording.alert.starts_at.timestamp()
    times = [start + 60.0 * i for i in range(int((end - start) // 60) + 1)]
    served = [0.1 + 0.4 * ((i * 7) % 5) / 4 for i in range(len(times))]
    wire = [0.3 if t >= onset else 0.001 for t in times]

    def edge(side: str, values: list[float]) -> MetricSeries:
        labels = {"__name__": "edge_latency_seconds", "caller": "web", "callee": "orders", "side": side}
        return MetricSeries(labels=labels, samples=list(zip(times, values, strict=True)))

    client = [s + w for s, w in zip(served, wire, strict=True)]
    rec = recording.model_copy(update={"metrics": [*recording.metrics, edge("client", client), edge("server", served)]})
    incident = _incident(rec)
    replay = replay_sources(rec, catalog).metrics
    assert replay is not None
    with prometheus(rec, tmp_path) as srv:
        got = asyncio.run(LiveMetrics(_reader(srv.url), catalog=catalog).scan(incident=incident))
    want = asyncio.run(replay.scan(incident=incident))
    gaps = [s.gap for s in got if s.gap is not None]
    assert gaps == [s.gap for s in want if s.gap is not None]
    assert [(g.caller, g.callee, g.gap_ms_baseline, g.gap_ms_window) for g in gaps] == [("web", "orders", 1.0, 300.0)]
