"""Small charts of the metric series an investigation cited, as inline SVG, that tell the truth.

:func:`collect` runs where the sources are (a worker): it reads each cited series around the onset,
and its limit as the series it is (a pool resized from 32 to 4 at 14:00 is a step, not a line at 4),
and keeps them with what to mark: the baseline period and level, the onset, the alert, the changes on
the timeline, and the shift triage found, but only one that is significant (:func:`significant_shift`).
Each chart carries the finding it illustrates as its caption.

:func:`svg` draws one, pure presentation: y ticks with their units, distinct colours, and a legend
of what is drawn. The page has no script: titles give the exact values on hover.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from html import escape
from statistics import median
from typing import Literal

from pydantic import AwareDatetime, BaseModel, Field

from opsagent.analysis.series import min_effect
from opsagent.errors import SourceError
from opsagent.fixtures import SignalDef
from opsagent.models import Incident, MetricsData, Report, SeriesStats, TimeRange
from opsagent.pipeline import SYMPTOM_SIGNAL
from opsagent.plan import Reading
from opsagent.selector import SelectorError, parse
from opsagent.stats import Sample

MAX_CHARTS = 6
MAX_POINTS = 240
#: A shift is drawn when the levels either side of it differ by this many robust spreads of the
#: level before it (and by the signal's smallest effect that counts): less is the series' own noise.
SHIFT_SPREADS = 3.0
#: The levels either side of a shift are read over this long: an incident that recovers within the
#: window still shows its shift, and a shift that is the recovery does not pass for the onset.
SHIFT_SPAN_S = 10 * 60

Role = Literal["alert", "supports", "refutes"]


class Marker(BaseModel):
    ts: AwareDatetime
    label: str


class Chart(BaseModel):
    """One series around the onset, with what the page marks on it."""

    observation_id: str | None = Field(description="the observation the chart illustrates, if one was cited")
    role: Role
    title: str
    caption: str | None = Field(default=None, description="the finding the chart illustrates, as the report says it")
    unit: str | None = None
    points: list[tuple[float, float]]
    window: TimeRange
    baseline: TimeRange
    baseline_level: float | None = None
    onset: AwareDatetime
    alerted: AwareDatetime | None = Field(default=None, description="when the alert fired")
    shift: AwareDatetime | None = Field(default=None, description="a significant shift, where triage found it")
    changes: list[Marker] = Field(default_factory=list)
    limit: float | None = Field(default=None, description="the limit in force at the peak")
    limit_points: list[tuple[float, float]] = Field(
        default_factory=list, description="the limit over the window, a step series"
    )


def _thin(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(points) <= MAX_POINTS:
        return points
    step = len(points) / MAX_POINTS
    return [points[int(i * step)] for i in range(MAX_POINTS)] + [points[-1]]


def significant_shift(points: list[Sample], stats: SeriesStats, spec: SignalDef, incident: Incident) -> datetime | None:
    """The shift triage found, when the series shows it: the engine called the series moved
    (up or down), the shift lies after the baseline (a shift inside the baseline is the baseline's
    own noise), and the levels either side of it (over :data:`SHIFT_SPAN_S`) differ in that
    direction by at least the signal's smallest effect and :data:`SHIFT_SPREADS` robust spreads of
    the level before it."""
    at = stats.change_point
    if at is None or stats.direction not in ("up", "down") or at < incident.baseline.end:
        return None
    t = at.timestamp()
    before = [v for ts, v in points if t - SHIFT_SPAN_S <= ts < t]
    after = [v for ts, v in points if t <= ts < t + SHIFT_SPAN_S]
    if len(before) < 3 or len(after) < 3:
        return None
    level = median(before)
    spread = 1.4826 * median(abs(v - level) for v in before)
    move = median(after) - level
    if stats.direction == "down":
        move = -move
    return at if move >= max(min_effect(spec), SHIFT_SPREADS * spread, 1e-12) else None


def _found(report: Report, wanted: SeriesStats) -> SeriesStats | None:
    """The stats an observation of the investigation holds for the same series (query, or signal
    and component), cited ones first."""
    cited = {e.observation_id for e in report.evidence}
    ordered = sorted(report.observations, key=lambda o: o.id not in cited)
    for obs in ordered:
        if isinstance(obs.data, MetricsData):
            for s in obs.data.stats:
                if s.query == wanted.query or (s.signal, s.component, s.scope) == (
                    wanted.signal,
                    wanted.component,
                    "service",
                ):
                    return s
    return None


def _constant(query: str) -> float | None:
    try:
        return parse(query).constant
    except SelectorError:
        return None


async def _limit_points(reading: Reading, stats: SeriesStats, spec: SignalDef, incident: Incident) -> list[Sample]:
    """The limit's own series over the window (a constant limit: flat at it)."""
    query = spec.limit.replace("$service", stats.component) if spec.limit else None
    if query is None or reading.series is None:
        return []
    constant = _constant(query)
    if constant is not None:
        return [(incident.window.start.timestamp(), constant), (incident.window.end.timestamp(), constant)]
    try:
        return await reading.series.series(
            query=query,
            spec=SignalDef(query=query, agg=spec.agg, direction="any", unit=spec.unit, type="gauge"),
            start=incident.window.start,
            end=incident.window.end,
        )
    except SourceError:
        return []


async def collect(report: Report, reading: Reading) -> list[Chart]:
    """Charts for the alert's own signal and every metric series cited as evidence, for or against."""
    if reading.series is None:
        return []
    incident = report.incident
    changes = [Marker(ts=e.ts, label=e.what) for e in report.timeline if e.kind == "change"]
    observations = {o.id: o for o in report.observations}
    wanted: list[tuple[str | None, Role, SeriesStats, str | None]] = []
    signal = SYMPTOM_SIGNAL.get(incident.symptom)
    if signal is not None and signal in reading.catalog:
        query = reading.catalog.query(signal, incident.service)
        alert_stats = SeriesStats.unmeasured(signal=signal, component=incident.service, query=query)
        wanted.append((None, "alert", alert_stats, incident.title))
    cited = [(e, "supports") for e in report.evidence] + [
        (e, "refutes") for r in report.refuted for e in r.verdict.refuting
    ]
    for evidence, role in cited:
        obs = observations.get(evidence.observation_id)
        if obs is None or not isinstance(obs.data, MetricsData):
            continue
        for stats in obs.data.stats[:2]:
            wanted.append((obs.id, "supports" if role == "supports" else "refutes", stats, evidence.statement))
    charts: list[Chart] = []
    seen: set[str] = set()
    for observation_id, role, stats, caption in wanted:
        if stats.query in seen or len(charts) >= MAX_CHARTS:
            continue
        seen.add(stats.query)
        spec = reading.catalog.get(stats.signal) or SignalDef(query=stats.query, direction="any")
        try:
            points = await reading.series.series(
                query=stats.query, spec=spec, start=incident.window.start, end=incident.window.end
            )
        except SourceError:
            continue
        if not points:
            continue
        if role == "alert":  # what the investigation found of the alert's own series, where it read it
            stats = _found(report, stats) or stats
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
                caption=caption,
                unit=stats.unit or spec.unit,
                points=_thin(points),
                window=incident.window,
                baseline=incident.baseline,
                baseline_level=level,
                onset=incident.onset,
                alerted=incident.alerted_at,
                shift=significant_shift(points, stats, spec, incident),
                changes=changes,
                limit=stats.limit,
                limit_points=await _limit_points(reading, stats, spec, incident),
            )
        )
    return charts


# ---------------------------------------------------------------- axes


def nice_ticks(lo: float, hi: float, *, most: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]: steps of 1, 2, 2.5 or 5 times a power of ten."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(most - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    ticks = [round(math.floor(lo / step) * step, 12)]
    while ticks[-1] < hi:  # the top tick is at or above the highest value: nothing is drawn off the axis
        ticks.append(round(ticks[-1] + step, 12))
    return ticks


def _number(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{value / 1e6:.3g}M"
    if magnitude >= 1e4:
        return f"{value / 1e3:.3g}k"
    return f"{value:.4g}"


#: Units a tick can carry whole; any other unit is said once, at the top of the axis.
_SHORT_UNITS = {"req/s": "/s", "requests/s": "/s", "1/s": "/s", "cores": " cores", "mib": " MiB", "count": ""}


def tick_label(value: float, unit: str | None, *, top: float) -> str:
    """A y tick with its unit: ``250 ms``, ``2 s``, ``50%``, ``512 MiB``, ``120/s``."""
    u = (unit or "").lower()
    if u in ("s", "seconds"):
        return f"{_number(value * 1000)} ms" if top < 1 else f"{_number(value)} s"
    if u in ("ms", "milliseconds"):
        return f"{_number(value)} ms"
    if u == "ratio":
        return f"{_number(value * 100)}%"
    if u in ("percent", "%"):
        return f"{_number(value)}%"
    if u == "bytes":
        for size, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if top >= size:
                return f"{_number(value / size)} {name}"
        return f"{_number(value)} B"
    if u in _SHORT_UNITS:
        return _number(value) + _SHORT_UNITS[u]
    return _number(value)


def axis_unit(unit: str | None) -> str | None:
    """The unit said once at the top of the y axis, when the ticks do not carry it."""
    u = (unit or "").lower()
    if not u or u in ("s", "seconds", "ms", "milliseconds", "ratio", "percent", "%", "bytes") or u in _SHORT_UNITS:
        return None
    return unit


def time_ticks(start: float, end: float, *, most: int = 6) -> list[float]:
    """Whole minutes for the x axis: every 5, 10, 15, 30 or 60 minutes."""
    span = max(end - start, 60.0)
    step = next((m * 60 for m in (5, 10, 15, 30, 60, 120, 240) if span / (m * 60) <= most), 480 * 60)
    first = math.ceil(start / step) * step
    return [first + i * step for i in range(int((end - first) // step) + 1)]


# ---------------------------------------------------------------- drawing

_W, _H = 600, 222
_LEFT, _RIGHT, _TOP = 64, 12, 22
_PLOT_H = 128
_LEGEND_Y = _TOP + _PLOT_H + 36

#: What each mark is drawn in; each kind of mark its own colour (Okabe-Ito, colour-blind safe).
COLOURS = {
    "series": "#0072B2",
    "limit": "#E69F00",
    "onset": "#D55E00",
    "alert": "#000000",
    "change": "#CC79A7",
    "shift": "#009E73",
    "base-level": "#6e7781",
    "baseline": "#e8f1fb",
}
_LEGEND = {
    "series": "series",
    "baseline": "baseline period",
    "base-level": "baseline level",
    "limit": "limit",
    "onset": "onset",
    "alert": "alert fired",
    "change": "change",
    "shift": "shift found",
}


def _legend(drawn: Iterable[str]) -> str:
    parts, x, row = [], float(_LEFT), 0
    for key in drawn:
        label = _LEGEND[key]
        colour = COLOURS[key]
        width = 24 + 6.2 * len(label)
        if x + width > _W - _RIGHT:  # the next row
            x, row = float(_LEFT), row + 1
        y = _LEGEND_Y + 14 * row
        swatch = (
            f'<rect x="{x:.0f}" y="{y - 8}" width="14" height="9" fill="{colour}" stroke="#8c959f"/>'
            if key == "baseline"
            else f'<line x1="{x:.0f}" y1="{y - 4}" x2="{x + 14:.0f}" y2="{y - 4}" class="{key}"/>'
        )
        parts.append(
            f'<g class="legend-item" data-mark="{key}">{swatch}'
            f'<text x="{x + 18:.0f}" y="{y}" class="tick">{escape(label)}</text></g>'
        )
        x += width
    return '<g class="legend">' + "".join(parts) + "</g>"


def svg(chart: Chart) -> str:
    """The chart as an inline ``<svg>`` element, self-contained and escaped."""
    t0, t1 = chart.window.start.timestamp(), chart.window.end.timestamp()
    values = [v for _, v in chart.points]
    limits = [v for _, v in chart.limit_points] or ([chart.limit] if chart.limit is not None else [])
    extra = [*limits, *([chart.baseline_level] if chart.baseline_level is not None else [])]
    ticks = nice_ticks(min([*values, *extra, 0.0]), max([*values, *extra]))
    lo, hi = ticks[0], ticks[-1]
    span_t = (t1 - t0) or 1.0
    plot_w = _W - _LEFT - _RIGHT

    def x(ts: float) -> float:
        return _LEFT + (min(max(ts, t0), t1) - t0) / span_t * plot_w

    def y(v: float) -> float:
        return _TOP + (1 - (v - lo) / ((hi - lo) or 1.0)) * _PLOT_H

    def at(when: datetime) -> float:
        return x(when.timestamp())

    def vline(cls: str, when: datetime, title: str) -> str:
        px = at(when)
        return (
            f'<line x1="{px:.1f}" y1="{_TOP}" x2="{px:.1f}" y2="{_TOP + _PLOT_H}" class="{cls}">'
            f"<title>{escape(title)}</title></line>"
        )

    title = chart.title + (f" ({chart.unit})" if chart.unit else "")
    style = (
        f".series{{fill:none;stroke:{COLOURS['series']};stroke-width:1.6}}"
        f".limit{{fill:none;stroke:{COLOURS['limit']};stroke-width:1.6;stroke-dasharray:6 3}}"
        f".onset{{stroke:{COLOURS['onset']};stroke-width:1.6}}"
        f".alert{{stroke:{COLOURS['alert']};stroke-width:1.2;stroke-dasharray:2 2}}"
        f".change line,line.change{{stroke:{COLOURS['change']};stroke-width:1.4}}"
        f".change path{{fill:{COLOURS['change']}}}"
        f".shift{{stroke:{COLOURS['shift']};stroke-width:1.4;stroke-dasharray:4 3}}"
        f".base-level{{stroke:{COLOURS['base-level']};stroke-dasharray:2 3}}"
        f".baseline{{fill:{COLOURS['baseline']}}}.grid{{stroke:#eef0f3}}.axis{{stroke:#8c959f}}"
        ".tick{font:10px system-ui,sans-serif;fill:#444c56}.label{font:10px system-ui,sans-serif}"
    )
    parts = [
        f'<svg class="chart" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" role="img" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title><style>{style}</style>',
        f'<rect x="{at(chart.baseline.start):.1f}" y="{_TOP}" '
        f'width="{max(at(chart.baseline.end) - at(chart.baseline.start), 0):.1f}" height="{_PLOT_H}" '
        f'class="baseline"><title>baseline {chart.baseline.start:%H:%M}–{chart.baseline.end:%H:%M} UTC</title></rect>',
    ]
    drawn = ["series", "baseline"]
    top = max(abs(lo), abs(hi))
    for value in ticks:
        ty = y(value)
        parts.append(
            f'<line x1="{_LEFT}" y1="{ty:.1f}" x2="{_W - _RIGHT}" y2="{ty:.1f}" class="grid"/>'
            f'<text x="{_LEFT - 4}" y="{ty + 3:.1f}" class="tick ytick" text-anchor="end">'
            f"{escape(tick_label(value, chart.unit, top=top))}</text>"
        )
    named = axis_unit(chart.unit)
    if named is not None:
        parts.append(
            f'<text x="{_LEFT - 4}" y="{_TOP - 8}" class="tick yunit" text-anchor="end">{escape(named)}</text>'
        )
    parts.append(f'<line x1="{_LEFT}" y1="{_TOP + _PLOT_H}" x2="{_W - _RIGHT}" y2="{_TOP + _PLOT_H}" class="axis"/>')
    for tx in time_ticks(t0, t1):
        px = x(tx)
        label = datetime.fromtimestamp(tx, tz=chart.window.start.tzinfo).strftime("%H:%M")
        parts.append(
            f'<line x1="{px:.1f}" y1="{_TOP + _PLOT_H}" x2="{px:.1f}" y2="{_TOP + _PLOT_H + 3}" class="axis"/>'
            f'<text x="{px:.1f}" y="{_TOP + _PLOT_H + 14}" class="tick xtick" text-anchor="middle">{label}</text>'
        )
    parts.append(
        f'<text x="{_W - _RIGHT}" y="{_TOP + _PLOT_H + 26}" class="tick" text-anchor="end">'
        f"UTC, {chart.window.start:%Y-%m-%d}</text>"
    )
    if chart.baseline_level is not None:
        by = y(chart.baseline_level)
        drawn.append("base-level")
        parts.append(
            f'<line x1="{_LEFT}" y1="{by:.1f}" x2="{_W - _RIGHT}" y2="{by:.1f}" class="base-level">'
            f"<title>baseline level {escape(tick_label(chart.baseline_level, chart.unit, top=top))}</title></line>"
        )
    step = sorted(chart.limit_points) or ([(t0, chart.limit), (t1, chart.limit)] if chart.limit is not None else [])
    if step:
        drawn.append("limit")
        path = [f"M{x(step[0][0]):.1f},{y(step[0][1]):.1f}"]
        for ts, v in step[1:]:
            path.append(f"H{x(ts):.1f}V{y(v):.1f}")  # a limit holds until it changes: a step
        path.append(f"H{x(t1):.1f}")
        shown = ", ".join(dict.fromkeys(tick_label(v, chart.unit, top=top) for _, v in step))
        parts.append(f'<path d="{"".join(path)}" class="limit"><title>limit {escape(shown)}</title></path>')
    for change in chart.changes:
        cx = at(change.ts)
        parts.append(
            f'<g class="change"><line x1="{cx:.1f}" y1="{_TOP}" x2="{cx:.1f}" y2="{_TOP + _PLOT_H}"/>'
            f'<path d="M{cx - 4:.1f},{_TOP} L{cx + 4:.1f},{_TOP} L{cx:.1f},{_TOP + 6} Z"/>'
            f"<title>{escape(f'{change.ts:%H:%M:%S} UTC {change.label}')}</title></g>"
        )
    if chart.changes:
        drawn.append("change")
    if chart.shift is not None:
        drawn.append("shift")
        parts.append(vline("shift", chart.shift, f"shift at {chart.shift:%H:%M:%S} UTC"))
    drawn.append("onset")
    ox = at(chart.onset)
    parts.append(
        vline("onset", chart.onset, f"onset {chart.onset:%H:%M:%S} UTC")
        + f'<text x="{ox + 3:.1f}" y="{_TOP - 4}" class="label" fill="{COLOURS["onset"]}">'
        f"onset {chart.onset:%H:%M}</text>"
    )
    if chart.alerted is not None:
        drawn.append("alert")
        parts.append(vline("alert", chart.alerted, f"alert fired {chart.alerted:%H:%M:%S} UTC"))
    line = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in chart.points)
    parts.append(f'<polyline points="{line}" class="series"/>')
    parts.append(_legend(drawn))
    parts.append("</svg>")
    return "".join(parts)
