"""Small charts of the metric series an investigation cited, as inline SVG.

:func:`collect` runs where the sources are (a worker), reads each cited series around the onset and
keeps it with what to mark on it: the baseline period and level, the onset, the shift triage found,
the changes on the timeline and a ceiling. :func:`svg` draws one; it is pure presentation.
"""

from __future__ import annotations

from datetime import datetime
from html import escape
from statistics import median
from typing import Literal

from pydantic import AwareDatetime, BaseModel, Field

from opsagent.errors import SourceError
from opsagent.fixtures import SignalDef
from opsagent.models import MetricsData, Report, SeriesStats, TimeRange
from opsagent.pipeline import SYMPTOM_SIGNAL
from opsagent.service.provider import Plan

MAX_CHARTS = 6
MAX_POINTS = 240


class Marker(BaseModel):
    ts: AwareDatetime
    label: str


class Chart(BaseModel):
    """One series around the onset, with what the page marks on it."""

    observation_id: str | None = Field(description="the observation the chart illustrates, if one was cited")
    role: Literal["alert", "supports", "refutes"]
    title: str
    unit: str | None = None
    points: list[tuple[float, float]]
    window: TimeRange
    baseline: TimeRange
    baseline_level: float | None = None
    onset: AwareDatetime
    shift: AwareDatetime | None = Field(default=None, description="where the series changed, as triage found")
    changes: list[Marker] = Field(default_factory=list)
    limit: float | None = None


def _thin(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(points) <= MAX_POINTS:
        return points
    step = len(points) / MAX_POINTS
    return [points[int(i * step)] for i in range(MAX_POINTS)] + [points[-1]]


async def collect(report: Report, plan: Plan) -> list[Chart]:
    """Charts for the alert's own signal and every metric series cited as evidence, for or against."""
    if plan.series is None:
        return []
    incident = report.incident
    changes = [Marker(ts=e.ts, label=e.what) for e in report.timeline if e.kind == "change"]
    observations = {o.id: o for o in report.observations}
    wanted: list[tuple[str | None, Literal["alert", "supports", "refutes"], SeriesStats]] = []
    signal = SYMPTOM_SIGNAL.get(incident.symptom)
    if signal is not None and signal in plan.catalog:
        query = plan.catalog.query(signal, incident.service)
        alert_stats = SeriesStats(
            signal=signal,
            component=incident.service,
            query=query,
            series=1,
            baseline_mean=None,
            baseline_std=None,
            window_mean=None,
            window_max=None,
            peak_ratio=None,
            mean_ratio=None,
            z_score=None,
            change_point=None,
            direction="unknown",
        )
        wanted.append((None, "alert", alert_stats))
    cited = [(e, "supports") for e in report.evidence] + [
        (e, "refutes") for r in report.refuted for e in r.verdict.refuting
    ]
    for evidence, role in cited:
        obs = observations.get(evidence.observation_id)
        if obs is None or not isinstance(obs.data, MetricsData):
            continue
        for stats in obs.data.stats[:2]:
            wanted.append((obs.id, "supports" if role == "supports" else "refutes", stats))
    charts: list[Chart] = []
    seen: set[str] = set()
    for observation_id, role, stats in wanted:
        if stats.query in seen or len(charts) >= MAX_CHARTS:
            continue
        seen.add(stats.query)
        spec = plan.catalog.get(stats.signal) or SignalDef(query=stats.query, direction="any")
        try:
            points = await plan.series.series(
                query=stats.query, spec=spec, start=incident.window.start, end=incident.window.end
            )
        except SourceError:
            continue
        if not points:
            continue
        if role == "alert":
            match = next((s for _, _, s in wanted[1:] if s.query == stats.query), None)
            stats = match or stats
        level = stats.baseline_mean
        if level is None:
            b0, b1 = incident.baseline.start.timestamp(), incident.baseline.end.timestamp()
            base = [v for t, v in points if b0 <= t < b1]
            level = median(base) if base else None
        charts.append(
            Chart(
                observation_id=observation_id,
                role=role,
                title=f"{stats.signal} · {stats.component}",
                unit=stats.unit or spec.unit,
                points=_thin(points),
                window=incident.window,
                baseline=incident.baseline,
                baseline_level=level,
                onset=incident.onset,
                shift=stats.change_point,
                changes=changes,
                limit=stats.limit,
            )
        )
    return charts


# ---------------------------------------------------------------- drawing

_W, _H = 560, 150
_LEFT, _RIGHT, _TOP, _BOTTOM = 52, 10, 14, 22


def _fmt(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{value / 1e6:.1f}M"
    if magnitude >= 1e3:
        return f"{value / 1e3:.1f}k"
    if magnitude >= 10 or value == 0:
        return f"{value:.0f}"
    return f"{value:.2g}"


def svg(chart: Chart) -> str:
    """The chart as an inline ``<svg>`` element, self-contained and escaped."""
    t0, t1 = chart.window.start.timestamp(), chart.window.end.timestamp()
    values = [v for _, v in chart.points]
    lo, hi = min([*values, 0.0]), max(values)
    limit_on_chart = chart.limit is not None and chart.limit <= hi * 1.6
    if limit_on_chart and chart.limit is not None:
        hi = max(hi, chart.limit)
    if chart.baseline_level is not None:
        hi = max(hi, chart.baseline_level)
    hi = hi if hi > lo else lo + 1.0
    span_t = (t1 - t0) or 1.0
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(ts: float) -> float:
        return _LEFT + (min(max(ts, t0), t1) - t0) / span_t * plot_w

    def y(v: float) -> float:
        return _TOP + (1 - (v - lo) / (hi - lo)) * plot_h

    def at(when: datetime) -> float:
        return x(when.timestamp())

    title = chart.title + (f" ({chart.unit})" if chart.unit else "")
    parts = [
        f'<svg class="chart" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" role="img" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
        f'<rect x="{at(chart.baseline.start):.1f}" y="{_TOP}" '
        f'width="{max(at(chart.baseline.end) - at(chart.baseline.start), 0):.1f}" height="{plot_h}" '
        f'class="baseline"><title>baseline {chart.baseline.start:%H:%M}–{chart.baseline.end:%H:%M}</title></rect>',
        f'<line x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{_W - _RIGHT}" y2="{_TOP + plot_h}" class="axis"/>',
        f'<text x="{_LEFT - 4}" y="{_TOP + 4}" class="tick" text-anchor="end">{escape(_fmt(hi))}</text>',
        f'<text x="{_LEFT - 4}" y="{_TOP + plot_h}" class="tick" text-anchor="end">{escape(_fmt(lo))}</text>',
        f'<text x="{_LEFT}" y="{_H - 6}" class="tick">{chart.window.start:%H:%M}</text>',
        f'<text x="{_W - _RIGHT}" y="{_H - 6}" class="tick" text-anchor="end">{chart.window.end:%H:%M}</text>',
    ]
    if chart.baseline_level is not None:
        by = y(chart.baseline_level)
        parts.append(
            f'<line x1="{_LEFT}" y1="{by:.1f}" x2="{_W - _RIGHT}" y2="{by:.1f}" class="base-level">'
            f"<title>baseline level {escape(_fmt(chart.baseline_level))}</title></line>"
        )
    if limit_on_chart and chart.limit is not None:
        ly = y(chart.limit)
        parts.append(
            f'<line x1="{_LEFT}" y1="{ly:.1f}" x2="{_W - _RIGHT}" y2="{ly:.1f}" class="limit">'
            f"<title>limit {escape(_fmt(chart.limit))}</title></line>"
        )
    elif chart.limit is not None:
        parts.append(
            f'<text x="{_W - _RIGHT}" y="{_TOP - 3}" class="tick" text-anchor="end">'
            f"limit {escape(_fmt(chart.limit))} (off the chart)</text>"
        )
    for change in chart.changes:
        cx = at(change.ts)
        parts.append(
            f'<g class="change"><line x1="{cx:.1f}" y1="{_TOP}" x2="{cx:.1f}" y2="{_TOP + plot_h}"/>'
            f'<path d="M{cx - 4:.1f},{_TOP} L{cx + 4:.1f},{_TOP} L{cx:.1f},{_TOP + 6} Z"/>'
            f"<title>{escape(f'{change.ts:%H:%M:%S} {change.label}')}</title></g>"
        )
    if chart.shift is not None:
        sx = at(chart.shift)
        parts.append(
            f'<line x1="{sx:.1f}" y1="{_TOP}" x2="{sx:.1f}" y2="{_TOP + plot_h}" class="shift">'
            f"<title>shift at {chart.shift:%H:%M:%S}</title></line>"
        )
    ox = at(chart.onset)
    parts.append(
        f'<line x1="{ox:.1f}" y1="{_TOP}" x2="{ox:.1f}" y2="{_TOP + plot_h}" class="onset">'
        f"<title>onset {chart.onset:%H:%M:%S}</title></line>"
        f'<text x="{ox + 3:.1f}" y="{_TOP + 9}" class="tick onset-label">onset {chart.onset:%H:%M}</text>'
    )
    path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in chart.points)
    parts.append(f'<polyline points="{path}" class="series"/>')
    parts.append("</svg>")
    return "".join(parts)
