import random
from itertools import pairwise

from opsagent.analysis.series import as_rate
from opsagent.fixtures import MetricSeries


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
