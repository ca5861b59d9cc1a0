import math
import random
import tracemalloc
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from statistics import median

from opsagent.analysis.series import (
    ScanGroup,
    as_rate,
    min_effect,
    peer_noise,
    scan_figures,
    scan_groups,
    scan_stats,
)
from opsagent.catalog import SignalCatalog
from opsagent.fixtures import MetricSeries, SignalDef
from opsagent.models import Incident, Symptom, TimeRange
from opsagent.stats import combine, normal_runs


def _increases(samples: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """A counter's increases written out: each sample less the one before, itself after a reset."""
    return [(t, cur - prev if cur >= prev else cur) for (_, prev), (t, cur) in pairwise(samples)]


def test_a_counter_reads_as_its_increases_a_reset_as_the_count_since() -> None:
    series = MetricSeries(labels={"__name__": "requests_total"}, samples=[(0, 10), (15, 12), (30, 3), (45, 3.5)])
    assert as_rate(series) == [(15.0, 2.0), (30.0, 3.0), (45.0, 0.5)]
    assert as_rate(MetricSeries(labels={"__name__": "requests_total"}, samples=[(0, 1)])) == []
    rng = random.Random(7)
    for _ in range(200):
        pairs = [
            (float(i * 15), rng.choice([0.0, rng.uniform(0, 1e6), rng.uniform(-1, 1) * 1e-300])) for i in range(40)
        ]
        got = as_rate(MetricSeries(labels={"__name__": "x"}, samples=pairs, type="counter"))
        assert got == _increases(pairs)  # the same floats, to the bit


def test_a_gauge_reads_as_its_own_samples_not_a_copy() -> None:
    # a recording's every series is read this way once: a copy of each doubled what its samples hold
    series = MetricSeries(labels={"__name__": "cpu_usage"}, samples=[(0, 0.5), (15, 0.25)])
    assert as_rate(series) is series.samples
    assert as_rate(series, "counter") == [(15.0, 0.25)]


def test_the_peers_noise_keeps_each_pooled_jump_in_eight_bytes() -> None:
    # one jump for every sample before onset of every component, kept for the whole investigation
    t0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    incident = Incident(
        id="inc-test",
        title="t",
        services=("s0",),
        symptom=Symptom.latency,
        onset=t0 + timedelta(hours=2),
        window=TimeRange(start=t0, end=t0 + timedelta(hours=3)),
        baseline=TimeRange(start=t0, end=t0 + timedelta(hours=1)),
    )
    rng = random.Random(3)
    series = [
        MetricSeries(
            labels={"__name__": "cpu_usage", "service": f"s{i}"},
            samples=[(t0.timestamp() + 60 * m, rng.uniform(10, 20)) for m in range(180)],
        )
        for i in range(200)
    ]
    groups = scan_groups((s, s.labels["service"], as_rate(s)) for s in series)
    catalog = SignalCatalog({"cpu": SignalDef(query='cpu_usage{service="$service"}', unit="percent")})
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        noise = peer_noise(groups, catalog=catalog, incident=incident)
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    (pooled,) = noise.values()
    assert len(pooled.deviations) > 20_000
    assert kept < 12 * len(pooled.deviations)
    assert list(pooled.deviations) == sorted(pooled.deviations)
    assert pooled.surprise(15.0, 15.0) == 1.0 and pooled.surprise(1e6, 15.0) == 0.0


def _pooled_one_by_one(groups: list[ScanGroup], catalog: SignalCatalog, incident: Incident) -> dict:
    """The peers' noise as it was computed before the scan's figures came at once: each group's
    members combined, its normal runs read, every metric's jumps pooled and sorted."""
    window = {
        "baseline": (incident.baseline.start.timestamp(), incident.baseline.end.timestamp()),
        "window_start": incident.window.start.timestamp(),
        "onset": incident.onset.timestamp(),
    }
    runs_of: dict = {}
    levels_of: dict = {}
    floors = {}
    for g in groups:
        _, spec = g.spec(catalog)
        runs = normal_runs(combine(g.members, "max" if g.node else spec.agg), **window)
        values = [v for run in runs for v in run]
        if len(values) >= 2:
            runs_of.setdefault((g.metric, g.side), []).extend(runs)
            levels_of.setdefault((g.metric, g.side), []).append(median(values))
            floors[(g.metric, g.side)] = min_effect(spec)
    out = {}
    for key, runs in runs_of.items():
        levels = sorted(levels_of[key])
        floor = max(floors[key], 0.05 * abs(levels[len(levels) // 2]), 1e-9)
        jumps = sorted(abs(math.log(b / a)) for run in runs for a, b in pairwise([max(v, 0.0) + floor for v in run]))
        out[key] = ([j.hex() for j in jumps], floor.hex())
    return out


def test_a_scan_measures_every_group_at_once_and_each_reads_as_measured_alone() -> None:
    t0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    rng = random.Random(11)
    series = []
    for i in range(120):
        n = rng.choice([2, 5, 40, 64, 64, 64, 90])
        level = rng.choice([0.0, 0.5, 30.0, 99.9, 2e4])
        samples = [
            (
                t0.timestamp() + 60 * m + rng.choice([0, 0, 0, 7]),
                level * (1 + 0.1 * rng.choice([-1, 0, 0, 1])) + rng.random(),
            )
            for m in range(n)
            if rng.random() > 0.1  # a missing minute now and then
        ]
        if i % 17 == 0:
            samples = samples[::-1]  # out of time order: measured alone, as before
        if i % 23 == 0 and samples:
            samples[0] = (samples[0][0], -0.0)
        name = rng.choice(["cpu_usage", "latency_ms", "success_ratio", "node_load1"])
        labels = {"__name__": name, "service": f"s{i % 40}", "pod": f"s{i % 40}-{i}"}
        if name == "node_load1" and i % 2:
            labels["node"] = f"n{i % 3}"
        series.append(
            MetricSeries(labels=labels, samples=samples, unit={"latency_ms": "ms", "success_ratio": "ratio"}.get(name))
        )
    groups = scan_groups((s, s.labels["service"], as_rate(s)) for s in series)
    assert any(len(g.members) > 1 for g in groups)  # pods combined
    catalog = SignalCatalog(
        {
            "cpu": SignalDef(query='cpu_usage{service="$service"}', unit="percent", agg="mean"),
            "ok": SignalDef(query='success_ratio{service="$service"}', unit="ratio", direction="down"),
        }
    )
    for onset_min, baseline in [(90, (0, 30)), (60, (-300, -240)), (45, (200, 260))]:
        incident = Incident(
            id="inc-test",
            title="t",
            services=("s0",),
            symptom=Symptom.latency,
            onset=t0 + timedelta(minutes=onset_min),
            window=TimeRange(start=t0, end=t0 + timedelta(minutes=120)),
            baseline=TimeRange(start=t0 + timedelta(minutes=baseline[0]), end=t0 + timedelta(minutes=baseline[1])),
        )
        scanned = scan_figures(groups, catalog=catalog, incident=incident)
        assert 0 < sum(scanned.batch.figures(i) is None for i in range(len(groups))) < len(groups) / 4
        noise = peer_noise(groups, catalog=catalog, incident=incident, scanned=scanned)
        assert {k: ([d.hex() for d in p.deviations], p.floor.hex()) for k, p in noise.items()} == _pooled_one_by_one(
            groups, catalog, incident
        )
        for i, g in enumerate(groups):
            peers = noise.get((g.metric, g.side))
            together = scan_stats(g, catalog=catalog, incident=incident, limit=None, peers=peers, scanned=scanned.of(i))
            alone = scan_stats(g, catalog=catalog, incident=incident, limit=None, peers=peers)
            assert together.model_dump_json() == alone.model_dump_json()


def test_a_series_too_large_to_square_is_left_unmeasured_and_the_scan_goes_on() -> None:
    # values near 1e200 have no square in a float (OverflowError): that series reads "unknown", and the
    # other groups of the scan are measured as ever (the whole scan used to fail)
    t0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def series(service: str, level: float) -> MetricSeries:
        samples = [(t0.timestamp() + 60 * m, level * (10 if m > 90 else 1) * (1 + m % 3 / 10)) for m in range(120)]
        return MetricSeries(labels={"__name__": "queue_bytes", "service": service}, samples=samples)

    groups = scan_groups((s, s.labels["service"], as_rate(s)) for s in [series("a", 1e199), series("b", 5.0)])
    incident = Incident(
        id="inc-test",
        title="t",
        services=("a",),
        symptom=Symptom.saturation,
        onset=t0 + timedelta(minutes=90),
        window=TimeRange(start=t0, end=t0 + timedelta(minutes=120)),
        baseline=TimeRange(start=t0, end=t0 + timedelta(minutes=60)),
    )
    catalog = SignalCatalog({})
    scanned = scan_figures(groups, catalog=catalog, incident=incident)
    noise = peer_noise(groups, catalog=catalog, incident=incident, scanned=scanned)
    for one_by_one in (False, True):
        got = {
            g.component: scan_stats(
                g,
                catalog=catalog,
                incident=incident,
                limit=None,
                peers=noise.get((g.metric, g.side)),
                scanned=None if one_by_one else scanned.of(i),
            )
            for i, g in enumerate(groups)
        }
        assert got["a"].direction == "unknown" and got["a"].window_mean is None
        assert got["b"].direction == "up" and got["b"].window_mean is not None
