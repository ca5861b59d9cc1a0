"""Links out of a report: the alert's source (``generatorURL``), its runbook, each cited series in
Prometheus (or a Grafana Explore URL from a template), a silence of the alert in Alertmanager, and
each cited change (the commit, the deploy).

Pure: URLs are built from what the report and the settings hold, never fetched. Only ``http`` and
``https`` URLs are kept: a link is shown on a page and in a terminal, and nothing else belongs there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from urllib.parse import quote, urlencode, urlsplit

from pydantic import BaseModel, ConfigDict, Field

from opsagent.models import Alert, ChangesData, Link, MetricsData, Report

#: Annotations that name an alert's runbook, by convention (kube-prometheus: runbook_url).
RUNBOOK_KEYS = ("runbook_url", "runbook", "playbook_url")
#: Cited series linked per observation: its first few (the observation's own stats order).
SERIES_PER_OBSERVATION = 2


class LinkSettings(BaseModel):
    """Where links out of a report point (``links:`` in the config file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prometheus_url: str | None = Field(
        default=None, description="the Prometheus cited series open in (default: the first configured prometheus)"
    )
    grafana_explore_url: str | None = Field(
        default=None,
        description="a Grafana Explore URL template per cited series, used instead of Prometheus: {query} "
        "(URL-encoded), {query_json} (URL-encoded, escaped for a JSON string), {start_ms}, {end_ms}, {start}, {end}",
    )
    alertmanager_url: str | None = Field(
        default=None,
        description="the Alertmanager the silence link opens (default: alertmanager.url; "
        "the webhook service: the notification's externalURL)",
    )


def web(url: str | None) -> str | None:
    """The URL when it is one a browser should open (http or https), else None."""
    if not url:
        return None
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    return url.strip() if parts.scheme in ("http", "https") and parts.netloc else None


def prometheus_graph(base: str, query: str, *, start: datetime, end: datetime) -> str:
    """Prometheus's expression browser on ``query``, graphed over [start, end] (UTC)."""
    minutes = max(1, round((end - start).total_seconds() / 60))
    params = {
        "g0.expr": query,
        "g0.tab": "0",
        "g0.range_input": f"{minutes}m",
        "g0.end_input": f"{end:%Y-%m-%d %H:%M:%S}",
    }
    return f"{base.rstrip('/')}/graph?{urlencode(params)}"


def grafana_explore(template: str, query: str, *, start: datetime, end: datetime) -> str:
    values = {
        "query": quote(query, safe=""),
        "query_json": quote(json.dumps(query)[1:-1], safe=""),
        "start_ms": str(int(start.timestamp() * 1000)),
        "end_ms": str(int(end.timestamp() * 1000)),
        "start": quote(start.isoformat(), safe=""),
        "end": quote(end.isoformat(), safe=""),
    }
    out = template
    for key, value in values.items():
        out = out.replace("{" + key + "}", value)
    return out


def silence(base: str, labels: dict[str, str]) -> str:
    """Alertmanager's form for a new silence, its matchers filled with the alert's labels."""
    matchers = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
    return f"{base.rstrip('/')}/#/silences/new?filter={quote('{' + matchers + '}', safe='')}"


def links_for(report: Report, alert: Alert, settings: LinkSettings | None = None) -> list[Link]:
    """Every link the report can give, each once, in the order an engineer wants them."""
    config = settings or LinkSettings()
    found = [*_alert_links(alert), *_series_links(report, config), *_change_links(report)]
    am = web(config.alertmanager_url)
    if am is not None and alert.labels:
        found.append(Link(kind="silence", label="silence this alert in Alertmanager", url=silence(am, alert.labels)))
    unique: dict[str, Link] = {}
    for link in found:
        unique.setdefault(link.url, link)
    return list(unique.values())


def _alert_links(alert: Alert) -> Iterator[Link]:
    source = web(alert.generator_url)
    if source is not None:
        yield Link(kind="alert", label="the alert's rule and query (generatorURL)", url=source)
    for key in RUNBOOK_KEYS:
        runbook = web(alert.annotations.get(key))
        if runbook is not None:
            yield Link(kind="runbook", label=f"runbook ({key})", url=runbook)
            return


def _series_links(report: Report, config: LinkSettings) -> Iterator[Link]:
    prometheus = web(config.prometheus_url)
    grafana = config.grafana_explore_url if web(config.grafana_explore_url) else None
    if prometheus is None and grafana is None:
        return
    window = report.incident.window
    cited = [e.observation_id for e in report.evidence] + [
        e.observation_id for r in report.refuted for e in r.verdict.refuting
    ]
    observations = {o.id: o for o in report.observations}
    for observation_id in dict.fromkeys(cited):
        obs = observations.get(observation_id)
        if obs is None or not isinstance(obs.data, MetricsData):
            continue
        for s in obs.data.stats[:SERIES_PER_OBSERVATION]:
            if grafana is not None:
                url, where = grafana_explore(grafana, s.query, start=window.start, end=window.end), "Grafana"
            elif prometheus is not None:
                url, where = prometheus_graph(prometheus, s.query, start=window.start, end=window.end), "Prometheus"
            else:
                return
            yield Link(
                kind="series", label=f"{s.signal} of {s.component} in {where}", url=url, observation_id=observation_id
            )


def _change_links(report: Report) -> Iterator[Link]:
    """Changes on the timeline or cited as evidence, where the source gave their URL."""
    timeline = " ".join(t.what for t in report.timeline)
    cited = [e.statement for e in report.evidence]
    for obs in report.observations:
        if not isinstance(obs.data, ChangesData):
            continue
        for c in obs.data.changes:
            url = web(c.url)
            if url is not None and (f"[{c.id}]" in timeline or any(c.summary in s for s in cited)):
                yield Link(kind="change", label=f"change {c.id}: {c.summary}", url=url, observation_id=obs.id)
