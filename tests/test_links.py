"""Links out of a report: the alert's source and runbook, each cited series in Prometheus or
Grafana, a silence in Alertmanager, each cited change. Only web URLs, each once."""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from opsagent.fixtures import load
from opsagent.links import LinkSettings, links_for, silence
from opsagent.models import Link, MetricsData, Report
from opsagent.pipeline import investigate_fixture
from tests.conftest import ORDER_INCIDENT


@pytest.fixture(scope="module")
def report() -> Report:
    found, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT))
    return found


def _by_kind(links: list[Link], kind: str) -> list[Link]:
    return [link for link in links if link.kind == kind]


def test_a_replayed_report_links_to_the_alerts_source_and_the_cited_change(report: Report) -> None:
    alert = load(ORDER_INCIDENT)[0].alert
    assert _by_kind(report.links, "alert")[0].url == alert.generator_url
    change = _by_kind(report.links, "change")
    assert [c.url for c in change] == ["https://git.shop.example/platform/gitops/commit/5c1e7a2"]
    assert "chg-5c1e7a2" in change[0].label
    assert not _by_kind(report.links, "series") and not _by_kind(report.links, "silence")  # nothing configured


def test_configured_prometheus_and_alertmanager_give_series_and_silence_links(report: Report) -> None:
    alert = load(ORDER_INCIDENT)[0].alert.model_copy(
        update={"annotations": {"runbook_url": "https://runbooks.shop.example/order-service/latency"}}
    )
    links = links_for(
        report,
        alert,
        LinkSettings(prometheus_url="http://prom.shop.example:9090/", alertmanager_url="http://am.shop.example:9093"),
    )
    assert _by_kind(links, "runbook")[0].url == "https://runbooks.shop.example/order-service/latency"
    cited = {e.observation_id for e in report.evidence} | {
        e.observation_id for r in report.refuted for e in r.verdict.refuting
    }
    queries = {
        s.query
        for o in report.observations
        if o.id in cited and isinstance(o.data, MetricsData)
        for s in o.data.stats[:2]
    }
    series = _by_kind(links, "series")
    assert {parse_qs(urlsplit(s.url).query)["g0.expr"][0] for s in series} == queries and queries
    first = parse_qs(urlsplit(series[0].url).query)
    assert series[0].url.startswith("http://prom.shop.example:9090/graph?")
    assert first["g0.range_input"] == ["92m"] and first["g0.end_input"] == ["2026-03-17 14:32:00"]  # the window
    silenced = _by_kind(links, "silence")[0].url
    assert silenced.startswith("http://am.shop.example:9093/#/silences/new?filter=")
    assert 'alertname="OrderServiceHighLatency"' in unquote(silenced)
    assert len({link.url for link in links}) == len(links)


def test_a_grafana_template_replaces_prometheus_and_escapes_the_query(report: Report) -> None:
    template = 'https://grafana.example/explore?left={"queries":[{"expr":"{query_json}"}],"from":"{start_ms}"}'
    links = links_for(
        report,
        load(ORDER_INCIDENT)[0].alert,
        LinkSettings(prometheus_url="http://prom:9090", grafana_explore_url=template),
    )
    series = _by_kind(links, "series")
    assert series and all(s.url.startswith("https://grafana.example/explore?") for s in series)
    assert all("in Grafana" in s.label for s in series)
    decoded = unquote(series[0].url)
    assert '\\"order-service\\"' in decoded  # the query's quotes escaped for the JSON string it sits in
    assert str(int(report.incident.window.start.timestamp() * 1000)) in decoded


def test_only_web_urls_become_links(report: Report) -> None:
    alert = load(ORDER_INCIDENT)[0].alert.model_copy(
        update={"generator_url": "javascript:alert(1)", "annotations": {"runbook_url": "file:///etc/passwd"}}
    )
    links = links_for(report, alert, LinkSettings(alertmanager_url="ftp://am"))
    assert all(link.url.startswith(("http://", "https://")) for link in links)
    assert not _by_kind(links, "alert") and not _by_kind(links, "runbook") and not _by_kind(links, "silence")


def test_a_silence_matches_every_label_of_the_alert() -> None:
    url = silence("http://am:9093/", {"service": 'a"b', "alertname": "X"})
    assert unquote(url) == 'http://am:9093/#/silences/new?filter={alertname="X",service="a\\"b"}'
