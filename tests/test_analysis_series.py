import random
import tracemalloc
from datetime import UTC, datetime, timedelta
from itertools import pairwise

from opsagent.analysis.series import as_rate, peer_noise, scan_groups
from opsagent.catalog import SignalCatalog
from opsagent.fixtures import MetricSeries, SignalDef
from opsagent.models import Incident, Symptom, TimeRange


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
