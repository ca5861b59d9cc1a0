import math
import random
from itertools import pairwise
from statistics import median

import numpy as np
import pytest

from opsagent.stats import (
    SHORT_REFERENCE_RATIO,
    Figures,
    Reference,
    batch_figures,
    change_point,
    combine,
    normal_runs,
    reference,
    robust_spread,
    series_figures,
    shift_direction,
    shortfall_ratio,
)


def _step(at: int, before: float, after: float, n: int = 60) -> list[tuple[float, float]]:
    return [(float(t * 60), before if t < at else after) for t in range(n)]


def test_change_point_finds_the_step() -> None:
    samples = _step(40, 0.2, 2.3)
    assert change_point(samples, 0, 3600) == 40 * 60


def test_change_point_respects_search_range() -> None:
    samples = _step(40, 0.2, 2.3)
    found = change_point(samples, 45 * 60, 3600)
    assert found is None or found >= 45 * 60


def test_flat_series_is_flat() -> None:
    assert shift_direction(0.5, 1.01) == "flat"
    assert shift_direction(12.0, 11.0) == "up"
    assert shift_direction(-8.0, 0.3) == "down"
    assert shift_direction(None, 2.0) == "unknown"


def test_spread_is_floored_for_constant_series() -> None:
    assert robust_spread([30.0] * 20, 30.0) > 0


def test_combine_pods() -> None:
    a = [(0.0, 1.0), (60.0, 2.0)]
    b = [(0.0, 3.0), (60.0, 4.0)]
    assert combine([a, b], "sum") == [(0.0, 4.0), (60.0, 6.0)]
    assert combine([a, b], "max") == [(0.0, 3.0), (60.0, 4.0)]


# ---------------------------------------------------------------- what a series is compared against

FIVE_MIN = 300.0
ONSET = 1_000_000.0


def _another_period(level: float, n: int = 50) -> list[tuple[float, float]]:
    """A history from weeks later, with a little noise."""
    return [(ONSET + 30 * 86400 + i * FIVE_MIN, level * (1 + 0.02 * (i % 3))) for i in range(n)]


def _reference(samples: list[tuple[float, float]], baseline: tuple[float, float]) -> Reference | None:
    return reference(samples, baseline=baseline, window_start=ONSET - 2 * FIVE_MIN, onset=ONSET)


HISTORY = (ONSET + 30 * 86400, ONSET + 31 * 86400)


def test_against_another_period_the_level_just_before_onset_is_the_normal() -> None:
    # The series sat at 3.0 s before onset, as it did all along in this period; its history says 0.5 s.
    samples = [*_another_period(0.5), (ONSET - 2 * FIVE_MIN, 3.0), (ONSET - FIVE_MIN, 3.01), (ONSET + 60, 3.02)]
    ref = _reference(samples, HISTORY)
    assert ref is not None and ref.centre == pytest.approx(3.005) and not ref.short


def test_against_another_period_a_level_that_agrees_keeps_the_history() -> None:
    samples = [*_another_period(0.5), (ONSET - 2 * FIVE_MIN, 0.5), (ONSET + 60, 2.0)]
    ref = _reference(samples, HISTORY)
    assert ref is not None and ref.centre == pytest.approx(0.51)


def test_against_another_period_a_series_with_nothing_before_onset_is_not_judged() -> None:
    samples = [*_another_period(0.5), (ONSET + 60, 2.0)]
    assert _reference(samples, HISTORY) is None


def test_the_sample_straddling_onset_is_not_the_normal_when_an_earlier_one_exists() -> None:
    # Stamped at the start of its 5 minutes, the last sample before onset already holds the incident.
    samples = [*_another_period(0.5), (ONSET - 2 * FIVE_MIN, 3.0), (ONSET - 100, 9.0), (ONSET + 60, 9.0)]
    ref = _reference(samples, HISTORY)
    assert ref is not None and ref.centre == 3.0


def test_coarse_series_with_no_history_is_judged_on_its_own_samples_without_a_spread() -> None:
    samples = [(ONSET - 2 * FIVE_MIN, 0.1), (ONSET - FIVE_MIN, 0.1), (ONSET + 60, 0.3)]
    ref = reference(
        samples, baseline=(ONSET - 2 * FIVE_MIN, ONSET - FIVE_MIN), window_start=ONSET - 2 * FIVE_MIN, onset=ONSET
    )
    assert ref is not None and ref.short and ref.centre == 0.1
    assert shift_direction(2.5, 1.3, min_ratio=SHORT_REFERENCE_RATIO) == "flat"


def test_fine_series_with_a_gappy_baseline_is_still_not_judged() -> None:
    # 15-second samples, two of them in the baseline (the rest missing): too little, not coarse.
    baseline = (ONSET - 900, ONSET - 300)
    samples = [(ONSET - 900.0, 1.0), (ONSET - 885.0, 1.0)]
    samples += [(ONSET - 300 + i * 15.0, 1.0) for i in range(20)] + [(ONSET + 60, 5.0)]
    assert reference(samples, baseline=baseline, window_start=ONSET - 900, onset=ONSET) is None


def test_availability_moves_by_its_shortfall() -> None:
    assert shortfall_ratio(99.9, 99.0, "%") == pytest.approx(10.0)
    assert shortfall_ratio(100.0, 97.0, "%") == math.inf
    assert shortfall_ratio(0.999, 0.99, "ratio") == pytest.approx(10.0)
    assert shortfall_ratio(0.93, 0.6, "ratio") is None  # a cache hit ratio is not at its ceiling
    assert shortfall_ratio(0.5, 0.4, "s") is None


# ---------------------------------------------------------------- many series at once


def _bits(value: object) -> object:
    """A figure as its exact bits: floats by their hex (-0.0 apart from 0.0), dataclasses field by field."""
    if isinstance(value, float):
        return value.hex()
    if isinstance(value, Reference):
        return (_bits(value.centre), _bits(value.spread), value.short, value.samples)
    if isinstance(value, Figures):
        return tuple(_bits(getattr(value, name)) for name in Figures.__dataclass_fields__)
    return value


def _random_series(rng: random.Random) -> list[tuple[float, float]]:
    """A series as recordings have them and as they should not: every length from none to beyond a
    power of two, missing and jittered samples, tied and flat values, steps, tiny and large levels;
    and now and then out of time order, a repeated time, a negative zero or a huge value."""
    step = rng.choice([15.0, 60.0, 300.0, 37.5])
    start = rng.choice([0.0, 1000.0, -600.0])
    times = [start + i * step for i in range(rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 12, 64, 65]))]
    if rng.random() < 0.3:
        times = [t for t in times if rng.random() > 0.3]
    if rng.random() < 0.1:
        times = sorted(t + rng.uniform(-5, 5) for t in times)
    kind = rng.random()
    pairs = []
    for t in times:
        if kind < 0.1:
            v = float(rng.choice([0, 1, 2, 2, 3]))
        elif kind < 0.2:  # ties either side of the centre: which one the spread leaves out matters
            v = 5.0 + rng.choice([-1.0, 0.0, 0.0, 0.0, 1.0])
        elif kind < 0.3:  # mostly one level, now and then another: the spread is the deviation's
            v = (10.0 if rng.random() < 0.3 else 0.0) + rng.gauss(0, 0.01)
        elif kind < 0.4:
            v = rng.uniform(0, 1) * 10 ** rng.randint(-5, 8)
        elif kind < 0.5:
            v = rng.gauss(0, 1)
        elif kind < 0.6:
            v = rng.choice([0.0, 100.0, 99.99, 99.9])
        else:
            v = 10 + rng.gauss(0, 1) + (20 if t > 2000 else 0)
        pairs.append((t, v))
    odd = rng.random()
    if pairs and odd < 0.05:
        rng.shuffle(pairs)
    elif pairs and odd < 0.08:
        pairs.append(pairs[0])
    elif pairs and odd < 0.1:
        i = rng.randrange(len(pairs))
        pairs[i] = (pairs[i][0], -0.0)
    elif pairs and odd < 0.11:
        i = rng.randrange(len(pairs))
        pairs[i] = (pairs[i][0], 1e120)
    return pairs


def test_the_batched_figures_equal_each_series_own_to_the_bit() -> None:
    rng = random.Random(24)
    batched = 0
    for _ in range(300):
        window_start = rng.choice([0.0, 600.0])
        onset = window_start + rng.choice([600.0, 1800.0, 3600.0])
        end = onset + rng.choice([900.0, 5000.0])
        baseline = rng.choice(
            [
                (window_start, window_start + rng.choice([100.0, 600.0, 1200.0])),  # inside the window
                (window_start - 7200.0, window_start - 7000.0),  # another period, before
                (end + 1000.0, end + 4000.0),  # another period, after
                (-3000.0, window_start + 900.0),
                (window_start + 100.0, onset),
            ]
        )
        times = {"baseline": baseline, "window_start": window_start, "onset": onset, "end": end}
        many = [_random_series(rng) for _ in range(rng.randint(1, 25))]
        batch = batch_figures([(np.array([t for t, _ in p]), np.array([v for _, v in p])) for p in many], **times)
        for i, pairs in enumerate(many):
            figures = batch.figures(i)
            in_order = len(pairs) > 0 and all(a < b for (a, _), (b, _) in pairwise(pairs))
            plain = all(v != 0 or math.copysign(1, v) > 0 for _, v in pairs) and all(abs(v) < 1e100 for _, v in pairs)
            assert (figures is not None) == (in_order and plain)  # the others are left to series_figures
            if figures is None:
                continue
            batched += 1
            assert _bits(figures) == _bits(series_figures(pairs, **times))
            runs = normal_runs(pairs, baseline=baseline, window_start=window_start, onset=onset)
            normal = [v for run in runs for v in run]
            counts, medians = batch.normals()
            assert (counts[i], _bits(medians[i]) if normal else None) == (
                len(normal),
                _bits(median(normal)) if normal else None,
            )
            mine = batch.jumps_of == i
            assert sorted(zip(batch.jumps_from[mine].tolist(), batch.jumps_to[mine].tolist(), strict=True)) == sorted(
                (a, b) for run in runs for a, b in pairwise(run)
            )
    assert batched > 1000


def test_a_batch_of_no_series_or_empty_ones_has_no_figures() -> None:
    times = {"baseline": (0.0, 60.0), "window_start": 0.0, "onset": 600.0, "end": 1200.0}
    assert len(batch_figures([], **times)) == 0
    empty = np.empty(0)
    batch = batch_figures([(empty, empty), (empty, empty)], **times)
    assert batch.figures(0) is None and batch.figures(1) is None and len(batch.jumps_of) == 0
