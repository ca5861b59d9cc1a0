"""HTML pages: the incident index and one incident's report. Plain, escaped, self-contained (no
script, no external asset); charts are inline SVG. Pure presentation, no analysis."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from html import escape
from urllib.parse import urlencode

from opsagent.models import Evidence, Report, SearchTree
from opsagent.report import (
    ALERT_HEADS,
    SUSPECT_ORDER,
    alert_rows,
    change_rows,
    clock_on,
    cost_line,
    feedback_commands,
    first_action,
    held_back,
    held_back_text,
    lesson_written,
    model_summary,
    other_results,
    outline,
    plan_outline,
    rival_lines,
    tree_summary,
    when,
)
from opsagent.service.charts import Chart, svg
from opsagent.store import IncidentRecord

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:0;color:#1d232a;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:16px 24px 48px}
header.top{background:#1d2733;color:#fff;padding:10px 24px}header.top a{color:#fff;text-decoration:none}
h1{font-size:20px;margin:14px 0 4px}h2{font-size:16px;margin:26px 0 8px;border-bottom:1px solid #dde1e6}
table{border-collapse:collapse;width:100%;background:#fff}th,td{padding:5px 8px;border-bottom:1px solid #e6e8eb;
text-align:left;vertical-align:top}th{background:#eef0f3;font-weight:600}code{font-size:12px}
.meta{color:#5b6570}.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;color:#fff}
.confirmed{background:#1a7f37}.probable{background:#b08800}.inconclusive,.failed{background:#c62828}
.firing{background:#d1242f}.resolved{background:#57606a}.queued,.running{background:#0969da}.done{background:#57606a}
.headline{font-size:17px;font-weight:600;margin:10px 0}.panel{background:#fff;border:1px solid #dde1e6;
border-radius:6px;padding:10px 14px;margin:8px 0}.charts{display:flex;flex-wrap:wrap;gap:10px}
figure{margin:0;background:#fff;border:1px solid #dde1e6;border-radius:6px;padding:6px}
figcaption{font-size:12px;color:#5b6570;max-width:560px}
ul{margin:4px 0;padding-left:20px}details{background:#fff;border:1px solid #dde1e6;border-radius:6px;
padding:6px 12px;margin:8px 0}summary{cursor:pointer;font-weight:600}details details{border:0;padding:0 0 0 14px;
margin:2px 0}details details summary{font-weight:400}.steps{color:#5b6570;font-size:12px}
.confirmed-mark{color:#1a7f37}.refuted-mark{color:#c62828}pre.cmd{background:#eef0f3;padding:6px 10px;margin:4px 0}
.do-first{font-size:15px;margin:6px 0 8px}.rival{margin:4px 0;color:#6e4f00}
"""


def e(value: object) -> str:
    return escape(str(value), quote=True)


def _when(ts: datetime | None) -> str:
    return when(ts) if ts is not None else "—"


def _page(title: str, body: str, *, refresh: int | None = None) -> str:
    meta = f'<meta http-equiv="refresh" content="{refresh}">' if refresh else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{meta}<title>{e(title)} · opsagent</title><style>{_CSS}</style></head><body>"
        '<header class="top"><a href="/">opsagent</a> · incidents</header>'
        f"<main>{body}</main></body></html>"
    )


def _badge(text: str | None) -> str:
    return f'<span class="badge {e(text)}">{e(text)}</span>' if text else ""


def _verdict(incident: IncidentRecord) -> str:
    if incident.outcome in ("confirmed", "probable") and incident.root_component:
        return f"{_badge(incident.outcome)} {e(incident.root_kind)} on <b>{e(incident.root_component)}</b>"
    if incident.outcome:
        return _badge(incident.outcome)
    return _badge(incident.investigation)


def index_page(incidents: list[IncidentRecord], *, state: str | None = None, service: str | None = None) -> str:
    def link(label: str, **query: str) -> str:
        return f'<a href="/?{e(urlencode(query))}">{e(label)}</a>' if query else f'<a href="/">{e(label)}</a>'

    filters = " · ".join([link("all"), link("firing", status="firing"), link("resolved", status="resolved")])
    shown = ", ".join(x for x in (state, service) if x) or "all"
    rows = "".join(
        f'<tr><td><a href="/incidents/{e(i.id)}.html">{e(i.title)}</a>'
        f'<div class="meta"><code>{e(i.id)}</code></div></td>'
        f'<td><a href="/?{e(urlencode({"service": i.service}))}">{e(i.service)}</a></td>'
        f"<td>{_badge(i.state)}</td><td>{_verdict(i)}</td><td>{i.notifications}</td>"
        f"<td>{e(_when(i.created_at))}</td></tr>"
        for i in incidents
    )
    table = (
        "<table><tr><th>incident</th><th>service</th><th>state</th><th>investigation</th>"
        f"<th>notifications</th><th>opened</th></tr>{rows}</table>"
        if incidents
        else '<p class="meta">No incidents yet. Alertmanager posts to <code>/webhook/alertmanager</code>.</p>'
    )
    body = f"<h1>Recent incidents</h1><p class='meta'>showing: {e(shown)} · {filters}</p>{table}"
    return _page("incidents", body, refresh=30)


def _figure(chart: Chart) -> str:
    role = {"alert": "the alert's signal", "supports": "supporting evidence", "refutes": "refuting evidence"}
    cite = f" · <code>{e(chart.observation_id)}</code>" if chart.observation_id else ""
    finding = f"<b>{e(chart.caption)}</b><br>" if chart.caption else ""
    return (
        f'<figure data-observation="{e(chart.observation_id or "")}">{svg(chart)}'
        f"<figcaption>{finding}{e(chart.title)} — {e(role[chart.role])}{cite}</figcaption></figure>"
    )


def _charts(charts: Iterable[Chart]) -> str:
    figures = "".join(_figure(c) for c in charts)
    return f'<div class="charts">{figures}</div>' if figures else ""


def _evidence_rows(items: Iterable[Evidence]) -> str:
    return "".join(
        f"<tr><td><code>{e(x.observation_id)}</code></td><td>{e(x.source.value)}</td><td>{e(x.statement)}</td></tr>"
        for x in items
    )


def _head(incident: IncidentRecord) -> str:
    return (
        f"<h1>{e(incident.title)}</h1><p class='meta'>{_badge(incident.state)} "
        f"<code>{e(incident.id)}</code> · service <b>{e(incident.service)}</b> · alert {e(incident.alertname)} · "
        f"opened {e(_when(incident.created_at))} · {incident.notifications} notification(s)"
        + (f" · resolved {e(_when(incident.resolved_at))}" if incident.resolved_at else "")
        + (f" · sources: {e(incident.source)}" if incident.source else "")
        + f' · <a href="/incidents/{e(incident.id)}">JSON</a></p>'
    )


def incident_page(incident: IncidentRecord, report: Report | None, charts: list[Chart]) -> str:
    if report is None:
        state = incident.investigation
        detail = f": {e(incident.error)}" if incident.error else ""
        body = _head(incident) + f"<div class='panel'>Investigation {_badge(state)}{detail}</div>"
        return _page(incident.title, body, refresh=5 if state in ("queued", "running") else None)

    parts = [_head(incident)]
    rc = report.root_cause
    headline = (
        f"{_badge(report.status)} {e(rc.kind)} on <b>{e(rc.component)}</b> · confidence {report.confidence:.2f}"
        if rc is not None
        else f"{_badge('inconclusive')} needs a human"
    )
    inc = report.incident
    when_line = f"onset {e(when(inc.onset))}" + (f" · alert fired {e(when(inc.alerted_at))}" if inc.alerted_at else "")
    first = first_action(report)
    do_first = (
        f"<p class='do-first'><b>Do first:</b> {e(first[0])}<br><span class='meta'>why: {e(first[1])}</span></p>"
        if first is not None
        else ""
    )
    rivals = "".join(f"<p class='rival'>{e(line)}</p>" for line in rival_lines(report))
    parts.append(
        f"<div class='panel verdict'><div class='headline'>{headline}</div>{do_first}{rivals}"
        f"<div>{e(report.statement)}</div><p class='meta'>{when_line}</p></div>"
    )
    if report.alerts:
        parts.append(
            f"<h2>Alerts joined ({len(report.alerts)})</h2><table><tr>"
            + "".join(f"<th>{h}</th>" for h in ALERT_HEADS)
            + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{e(cell)}</td>" for cell in row) + "</tr>" for row in alert_rows(report))
            + "</table>"
        )
    alert_charts = [c for c in charts if c.role == "alert"]
    if alert_charts:
        parts.append("<h2>The alert's signal</h2>" + _charts(alert_charts))

    parts.append("<h2>Evidence</h2>")
    if report.evidence:
        parts.append(
            "<table><tr><th>observation</th><th>source</th><th>finding</th></tr>"
            + _evidence_rows(report.evidence)
            + "</table>"
        )
        cited = {x.observation_id for x in report.evidence}
        parts.append(_charts(c for c in charts if c.role == "supports" and c.observation_id in cited))
    else:
        parts.append("<p class='meta'>No evidence confirms a cause.</p>")

    if report.timeline:
        parts.append(f"<h2>Timeline</h2><p class='meta'>{inc.onset:%Y-%m-%d}, times in UTC</p><table>")
        parts.extend(
            f"<tr><td>{e(clock_on(t.ts, inc.onset))}</td><td>{e(t.kind)}</td><td>{e(t.what)}</td></tr>"
            for t in report.timeline
        )
        parts.append("</table>")

    parts.append("<h2>Ruled out</h2>")
    kept_out = held_back(report)
    for r in report.refuted:
        ids = {x.observation_id for x in r.verdict.refuting}
        parts.append(
            f"<div class='panel'><b>{e(r.hypothesis.kind)}</b> on {e(r.hypothesis.component)} — "
            f"{e(r.hypothesis.statement)}<table><tr><th>refuted by</th><th>source</th><th>finding</th></tr>"
            + _evidence_rows(r.verdict.refuting)
            + "</table>"
            + _charts(c for c in charts if c.role == "refutes" and c.observation_id in ids)
            + "</div>"
        )
    for what, use in kept_out:
        name, why = held_back_text(what, use)
        parts.append(f"<div class='panel held-back'><b>{e(name)}</b> — {e(why)}</div>")
    if not report.refuted and not kept_out:
        parts.append("<p class='meta'>Nothing was ruled out.</p>")

    others = other_results(report)
    if others:
        parts.append("<h2>Other hypotheses</h2><ul>")
        parts.extend(
            f"<li>{e(r.hypothesis.kind)} on {e(r.hypothesis.component)}: {e(r.verdict.status)} "
            f"({e(r.verdict.reason)})</li>"
            for r in others
        )
        parts.append("</ul>")

    if report.search is not None and report.search.rounds:
        parts.append("<h2>Search tree</h2>" + _search(report.search))

    parts.append(
        f"<h2>Suspects</h2><p class='meta'>{e(SUSPECT_ORDER)}</p>"
        "<table><tr><th>#</th><th>component</th><th>kind</th><th>status</th><th>score</th>"
        "<th>why</th></tr>"
    )
    parts.extend(
        f"<tr><td>{n}</td><td>{e(s.component)}</td><td>{e(s.kind)}</td><td>{e(s.status)}</td>"
        f"<td>{s.score:.3f}</td><td>{e(s.why)}</td></tr>"
        for n, s in enumerate(report.suspects[:8], 1)
    )
    parts.append("</table>")

    if report.changes:
        heads = ("#", "change", "service", "versions", "new version", "score", "why")
        parts.append("<h2>Changes in flight</h2><table><tr>" + "".join(f"<th>{h}</th>" for h in heads) + "</tr>")
        parts.extend("<tr>" + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>" for cells in change_rows(report))
        parts.append("</table>")

    parts.append("<h2>Lessons</h2>")
    if report.lessons_used:
        parts.append("<p><b>Used</b></p><ul>")
        parts.extend(
            f"<li><code>{e(u.lesson_id)}</code> (relevance {u.relevance:.2f}): "
            f"{e('; '.join(u.effects) or 'no effect')}</li>"
            for u in report.lessons_used
        )
        parts.append("</ul>")
    if report.lessons:
        parts.append("<p><b>Written</b></p><ul>")
        parts.extend(f"<li>{e(lesson_written(le))}</li>" for le in report.lessons)
        parts.append("</ul>")
    if not report.lessons_used and not report.lessons:
        parts.append("<p class='meta'>No lessons used or written.</p>")

    if report.unreadable_sources:
        parts.append("<h2>Sources that could not be read</h2><ul>")
        parts.extend(f"<li>{e(k)}: {e(v)}</li>" for k, v in report.unreadable_sources.items())
        parts.append("</ul>")
    if report.plan:
        parts.append("<h2>Plan</h2><ul class='plan'>")
        outline_html = plan_outline(report, text=e, code=lambda name: f"<code>{e(name)}</code>")
        parts.extend(f"<li class='depth-{depth}'>{line}</li>" for depth, line in outline_html)
        parts.append("</ul>")
    if report.next_steps:
        parts.append("<h2>Next steps</h2><ul>" + "".join(f"<li>{e(s)}</li>" for s in report.next_steps) + "</ul>")
    if report.links:
        parts.append("<h2>Links</h2><ul class='links'>")
        parts.extend(
            f'<li data-kind="{e(link.kind)}"><a href="{e(link.url)}" rel="noreferrer">{e(link.label)}</a></li>'
            for link in report.links
        )
        parts.append("</ul>")
    parts.append(f"<h2>Cost</h2><p>{e(cost_line(report).removeprefix('cost: '))}</p>")
    model = model_summary(report)
    if model is not None and report.llm is not None:
        parts.append(f"<p>{e(model)}</p>")
        if report.llm.notes:
            parts.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in report.llm.notes) + "</ul>")
    commands = "\n".join(feedback_commands(report))
    parts.append(
        f"<h2>Feedback</h2><p>Incident <code>{e(inc.id)}</code>. Was this right? Tell opsagent:</p>"
        f"<pre class='cmd'>{e(commands)}</pre>"
    )
    return _page(incident.title, "".join(parts))


def _search(tree: SearchTree) -> str:
    """The search tree, collapsed: nested lists of the same outline the terminal draws."""
    out = [f"<details class='search'><summary>{e(tree_summary(tree))}</summary>"]
    depth = -1
    for line in outline(tree):
        if line.depth > depth:
            out.append("<ul>" * (line.depth - depth))
        else:
            out.append("</li>" + "</ul></li>" * (depth - line.depth))
        depth = line.depth
        mark = f" class='{e(line.status)}-mark'" if line.status else ""
        text = f"<code>{e(line.text)}</code>" if line.kind == "step" else e(line.text)
        out.append(f"<li data-kind='{line.kind}'{mark}>" + (f"<b>{text}</b>" if line.kind == "round" else text))
    out.append("</li>" + "</ul></li>" * depth + "</ul>" if depth >= 0 else "")
    out.append("</details>")
    return "".join(out)


def not_found_page(what: str) -> str:
    return _page("not found", f"<h1>Not found</h1><p>No incident {e(what)}.</p><p><a href='/'>All incidents</a></p>")
