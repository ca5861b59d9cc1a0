"""Charts that tell the truth: each chart of a report page checked against the finding it illustrates
(the series behind it supports the statement under it), limits drawn as the step series they are,
only significant shifts marked, y ticks with units, distinct colours and a legend of what is drawn."""

from __future__ import annotations

import asyncio
import re
from bisect import bisect_right
from pathlib import Path
from statistics import median

import pytest

from opsagent.fixtures import SignalDef, load
from opsagent.models import SeriesStats
from opsagent.pipeline import investigate_fixture
from opsagent.service.charts import COLOURS, Chart, collect, significant_shift, svg
from opsagent.service.provider import FIXTURE_LABEL, FixtureProvider
from tests.conftest import INCIDENTS, ORDER_INCIDENT

SLUGS = sorted(p.name for p in INCIDENTS.iterdir() if (p / "incident.yaml").exists())


def _charts(incident: Path) -> list[Chart]:
    recording, _ = load(incident)
    alert = recording.alert.model_copy(update={"labels": {**recording.alert.labels, FIXTURE_LABEL: incident.name}})
    reading = FixtureProvider(INCIDENTS).reading(alert)
    assert reading is not None
    report, _ = asyncio.run(investigate_fixture(incident))
    return asyncio.run(collect(report, reading))


_NUMBER = r"(-?[0-9.]+(?:e[-+]?[0-9]+)?)"
_VALUE = _NUMBER + r"(?: ([A-Za-z/%]+))?"
PEAKED = re.compile(rf"peaked at {_NUMBER}/{_NUMBER} \(([0-9]+)% of its limit\)")
MOVED = re.compile(rf"^\S+ {_VALUE} -> {_VALUE} \(")
AT = re.compile(rf"^\S+ at {_VALUE} \(threshold")
NONE_MOVED = re.compile(r"^none of the \d+ series of \S+ moved beyond [x×]([0-9.]+)")


def _value(number: str, unit: str | None, chart_unit: str | None) -> float:
    """A figure as the report prints it (observations.fmt), in the chart's unit."""
    value = float(number)
    if unit == "ms" and chart_unit in ("s", "seconds"):
        return value / 1000
    if unit == "MiB" and chart_unit == "bytes":
        return value * 2**20
    return value


def _close(a: float, b: float) -> bool:
    """Equal to the precision the report prints figures with (three significant digits, or whole)."""
    return abs(a - b) <= max(0.006 * max(abs(a), abs(b)), 0.5 if max(abs(a), abs(b)) >= 100 else 1e-9)


def _limit_at(chart: Chart, ts: float) -> float:
    steps = sorted(chart.limit_points)
    i = bisect_right(steps, (ts, float("inf"))) - 1
    return steps[max(i, 0)][1]


def _window(chart: Chart) -> list[tuple[float, float]]:
    start, end = chart.onset.timestamp(), chart.window.end.timestamp()
    return [(t, v) for t, v in chart.points if start <= t < end]


def supports(chart: Chart) -> str | None:
    """Why the series behind the chart does not support its caption; None when it does."""
    caption = chart.caption or ""
    window = _window(chart)
    if (m := PEAKED.search(caption)) is not None:
        peak, limit, percent = float(m.group(1)), float(m.group(2)), int(m.group(3))
        fractions = [(v / _limit_at(chart, t), v, _limit_at(chart, t)) for t, v in window if _limit_at(chart, t)]
        frac, value, at_limit = max(fractions)
        if round(frac * 100) != percent or not _close(value, peak) or not _close(at_limit, limit):
            return f"the series peaks at {value}/{at_limit} ({frac:.0%}), the caption says {peak}/{limit} ({percent}%)"
        return None
    if (m := MOVED.search(caption)) is not None:
        before = _value(m.group(1), m.group(2), chart.unit)
        after = _value(m.group(3), m.group(4), chart.unit)
        b0, b1 = chart.baseline.start.timestamp(), chart.baseline.end.timestamp()
        base = [v for t, v in chart.points if b0 <= t < b1]
        level = median(base)
        noise = median(abs(v - level) for v in base) * 1.4826
        if abs(level - before) > max(3 * noise, 0.25 * abs(before), 1e-3):
            return f"the baseline sits at {level:.4g}, the caption says {before}"
        values = [v for _, v in window]
        reached = max(values) >= after if after >= before else min(values) <= after
        if not reached:
            return f"the series never reaches {after} after onset (it spans {min(values):.4g}..{max(values):.4g})"
        return None
    if (m := AT.search(caption)) is not None:
        value = _value(m.group(1), m.group(2), chart.unit)
        values = [v for _, v in window]
        if not min(values) - 1e-9 <= value <= max(values) + 1e-9 and not _close(value, median(values)):
            return f"the series after onset spans {min(values):.4g}..{max(values):.4g}, the caption says {value}"
        return None
    if (m := NONE_MOVED.search(caption)) is not None:
        bound = float(m.group(1))
        b0, b1 = chart.baseline.start.timestamp(), chart.baseline.end.timestamp()
        level = median(v for t, v in chart.points if b0 <= t < b1)
        after = median(v for _, v in window)
        if level > 0 and not 1 / bound <= after / level <= bound:
            return f"the series moved from {level:.4g} to {after:.4g}, beyond {bound}× its baseline"
        return None
    return f"no check knows the caption {caption!r}"


@pytest.mark.parametrize("slug", SLUGS)
def test_every_chart_is_supported_by_the_series_behind_it(slug: str) -> None:
    for chart in _charts(INCIDENTS / slug):
        drawn = svg(chart)
        assert 'class="onset"' in drawn and "<polyline" in drawn
        if chart.alerted is not None:
            assert 'class="alert"' in drawn
        if chart.shift is not None:  # a marked shift lies after the baseline, where the series moved
            assert chart.shift >= chart.baseline.end and 'class="shift"' in drawn
        if chart.role == "alert":
            assert chart.caption  # the alert's own summary
            continue
        problem = supports(chart)
        assert problem is None, f"{slug}: {chart.title}: {chart.caption}: {problem}"


def test_a_limit_that_changed_is_drawn_as_the_step_it_was() -> None:
    chart = next(c for c in _charts(ORDER_INCIDENT) if c.title == "threadpool_active · order-service")
    limits = [v for _, v in sorted(chart.limit_points)]
    assert limits[0] == 32 and min(limits) == 4 and limits[-1] == 32  # 32, resized to 4 at 14:00, reverted
    drawn = svg(chart)
    path = re.search(r'<path d="([^"]+)" class="limit">', drawn)
    assert path is not None and path.group(1).count("V") >= 3  # steps, not one line at the peak's limit
    assert chart.shift is None  # the engine's change point (13:33) lies inside the baseline: noise


def test_ticks_carry_units_marks_have_distinct_colours_and_the_legend_says_what_is_drawn() -> None:
    charts = {c.title: c for c in _charts(ORDER_INCIDENT)}
    latency = svg(charts["latency_p99 · order-service"])
    ticks = re.findall(r'class="tick ytick"[^>]*>([^<]+)<', latency)
    assert len(ticks) >= 3 and all(t.endswith(" s") or t.endswith(" ms") for t in ticks), ticks
    threads = svg(charts["threadpool_active · order-service"])
    assert 'class="tick yunit"' in threads and ">threads<" in threads
    assert len(set(COLOURS.values())) == len(COLOURS)  # no two kinds of mark share a colour
    assert COLOURS["onset"] != COLOURS["limit"]
    legend = re.findall(r'data-mark="([a-z-]+)"', threads)
    assert set(legend) >= {"series", "limit", "onset", "alert", "change", "baseline", "base-level"}
    assert "shift" not in legend  # nothing significant to mark, so no entry for it
    assert "shift" in re.findall(r'data-mark="([a-z-]+)"', latency)  # p99 shifted at onset: marked and named


def test_a_change_point_in_noise_is_not_drawn() -> None:
    recording, _ = load(ORDER_INCIDENT)
    from opsagent.incident import open_incident

    incident = open_incident(recording.alert, window=recording.window, baseline=recording.baseline)
    t0 = incident.window.start.timestamp()
    noisy = [(t0 + 60 * i, 10.0 + (3.0 if i % 2 else -3.0)) for i in range(90)]
    claimed = SeriesStats(
        signal="x",
        component="c",
        query="x",
        series=1,
        baseline_mean=10.0,
        baseline_std=3.0,
        window_mean=12.0,
        window_max=13.0,
        peak_ratio=1.3,
        mean_ratio=1.2,
        z_score=0.7,
        change_point=incident.onset,
        direction="up",
    )
    spec = SignalDef(query="x", min_delta=1.0)
    assert significant_shift(noisy, claimed, spec, incident) is None
    stepped = [(t, v + (20.0 if t >= incident.onset.timestamp() else 0.0)) for t, v in noisy]
    assert significant_shift(stepped, claimed, spec, incident) == incident.onset
