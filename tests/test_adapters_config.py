"""Live sources from configuration: secrets from the environment only, several instances of a kind,
`opsagent doctor` (its table and exit codes)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import respx
import typer
from typer.testing import CliRunner

from adapters.changes_git.config import GitConfig, PathRule
from adapters.config import open_live_sources, sources_from_settings
from adapters.elasticsearch.config import ElasticsearchConfig
from adapters.jaeger.config import JaegerConfig
from adapters.prometheus.config import PrometheusConfig
from adapters.sourceconfig import SourcesConfig
from adapters.wrappers import WrappedReader
from opsagent.cli.sources import register
from opsagent.doctor import check, diagnose
from opsagent.errors import ConfigError
from opsagent.models import Alert
from opsagent.pipeline import investigate
from opsagent.plan import Planner
from opsagent.settings import load_settings
from opsagent.sources.live import LiveMetrics, MetricsFanOut
from tests.prometheus_server import free_port
from tests.service_support import order_alert

CONFIG = """
sources:
  prometheus:
    - {name: main, url: "http://prom-a.test:9090", auth: bearer}
    - {name: edge, url: "http://prom-b.test:9090", rate_limit_per_s: 5}
  elasticsearch:
    - {name: logs, url: "https://es.test:9200", index: "app-*", auth: api_key, fields: {service: kubernetes.labels.app}}
  git:
    - {name: gitops, path: /srv/gitops, rules: [{pattern: "apps/{service}/**"}]}
  change_feed:
    - {name: deploys, url: "http://deploys.test", query: {path: /api/deploys, items: data}}
  jaeger:
    - {name: traces, url: "http://jaeger.test:16686", auth: bearer}
  tempo:
    - {name: tempo, url: "http://tempo.test:3200", headers: {X-Scope-OrgID: prod}}
signals:
  latency_p99: {query: 'histogram_quantile(0.99, sum by (le) (rate(my_latency_bucket{app="$service"}[1m])))'}
"""


@pytest.fixture
def router() -> Iterator[respx.Router]:
    with respx.mock(assert_all_called=False) as mock:
        yield mock


def _config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    path = tmp_path / "opsagent.yaml"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setenv("OPSAGENT_CONFIG", str(path))
    return path


def test_secrets_in_the_file_are_refused_with_the_variable_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _config_file(
        tmp_path, monkeypatch, "sources:\n  prometheus:\n    - {name: main, url: 'http://p:9090', token: hunter2}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert "OPSAGENT_PROMETHEUS_MAIN_TOKEN" in str(caught.value) and "hunter2" not in str(caught.value)


def test_settings_build_one_source_per_kind_with_instances_fanned_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _config_file(tmp_path, monkeypatch, CONFIG)
    settings = load_settings()
    live = sources_from_settings(settings)
    assert live.sources.kinds() == {"metrics", "logs", "changes", "traces"}
    metrics = live.sources.metrics
    assert isinstance(metrics, LiveMetrics) and isinstance(metrics.reader, MetricsFanOut)
    assert metrics.name == "metrics:main+edge"
    assert isinstance(metrics.reader.readers[1], WrappedReader)  # the rate-limited one
    assert live.sources.changes is not None and live.sources.changes.name == "changes:gitops+deploys"
    assert live.sources.traces is not None and live.sources.traces.name == "traces:traces+tempo"
    assert "my_latency_bucket" in live.catalog.query("latency_p99", "checkout")  # the deployment's override
    assert "http_server_requests_seconds" in live.catalog.query("request_rate", "checkout")  # a live default
    assert live.catalog.signals["latency_p99"].direction == "up"  # semantics kept from the replay catalog
    asyncio.run(live.aclose())


def test_bearer_token_comes_from_the_environment(router: respx.Router) -> None:
    route = router.get("http://jaeger.test:16686/api/services").mock(
        return_value=httpx.Response(
            200, json={"data": ["checkout"], "total": 1, "limit": 0, "offset": 0, "errors": None}
        )
    )
    config = SourcesConfig(jaeger=[JaegerConfig(name="traces", url="http://jaeger.test:16686", auth="bearer")])
    health = asyncio.run(check(config.jaeger[0], environ={"OPSAGENT_JAEGER_TRACES_TOKEN": "s3cr3t"}))
    assert health.ok and health.version == "1 services"
    assert route.calls[0].request.headers["authorization"] == "Bearer s3cr3t"


def test_doctor_says_what_is_wrong_and_how_to_fix_it(router: respx.Router, tmp_path: Path) -> None:
    repo = tmp_path / "gitops"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "README.md").write_text("x\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q", "-m", "first"], check=True
    )
    router.get("http://jaeger.test:16686/api/services").mock(return_value=httpx.Response(401, text="Unauthorized"))
    config = SourcesConfig(
        prometheus=[PrometheusConfig(name="main", url=f"http://127.0.0.1:{free_port()}", auth="basic", username="ops")],
        git=[GitConfig(name="gitops", path=repo, rules=[PathRule(pattern="apps/{service}/**")])],
        jaeger=[JaegerConfig(name="traces", url="http://jaeger.test:16686")],
    )
    rows = {h.name: h for h in asyncio.run(diagnose(config, environ={}))}
    prom = rows["main"]
    assert not prom.reachable
    assert any("OPSAGENT_PROMETHEUS_MAIN_PASSWORD is not set" in p for p in prom.problems)
    assert any("check the address" in f for f in prom.fixes)
    git = rows["gitops"]
    assert git.reachable and git.version and "matches a rule" in git.problems[0]
    jaeger = rows["traces"]
    assert jaeger.reachable and "HTTP 401" in jaeger.problems[0] and "credentials were refused" in jaeger.fixes[0]


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        pass

    register(app)
    return app


def test_doctor_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    _config_file(tmp_path, monkeypatch, "lessons_top_k: 3\n")
    result = runner.invoke(_app(), ["doctor"])
    assert result.exit_code == 2 and "no live sources configured" in result.output
    _config_file(
        tmp_path,
        monkeypatch,
        f"sources:\n  prometheus:\n    - {{name: main, url: 'http://127.0.0.1:{free_port()}', timeout_s: 2}}\n",
    )
    result = runner.invoke(_app(), ["doctor"])
    assert result.exit_code == 3 and "prometheus:main" in result.output and "check the address" in result.output
    _config_file(tmp_path, monkeypatch, "sources:\n  jaeger:\n    - {name: j, url: 'http://j:1', password: x}\n")
    result = runner.invoke(_app(), ["doctor"])
    assert result.exit_code == 2 and "OPSAGENT_JAEGER_J_PASSWORD" in result.output


def test_no_sources_configured_gives_no_sources() -> None:
    live = open_live_sources(SourcesConfig())
    assert live.sources.kinds() == set()


def test_a_source_whose_client_cannot_be_built_is_named_and_the_others_are_read(tmp_path: Path) -> None:
    # the client refuses a CA bundle that is not there; Prometheus is merely down
    config = SourcesConfig(
        elasticsearch=[ElasticsearchConfig(name="es", url="https://es.test:9200", verify=str(tmp_path / "ca.pem"))],
        prometheus=[PrometheusConfig(name="main", url=f"http://127.0.0.1:{free_port()}")],
    )
    alert = order_alert()

    async def run() -> dict[str, str]:
        async with open_live_sources(config) as live:
            report = await investigate(Planner.shipped().plan(live.reading(Alert.model_validate(alert))))
        assert report.status == "inconclusive"
        return report.unreadable_sources

    unreadable = asyncio.run(run())
    assert unreadable["logs:es"].startswith("could not be opened: ValueError")
    assert "Connection refused" in unreadable["metrics:main"]
