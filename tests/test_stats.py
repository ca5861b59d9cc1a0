import math

import pytest

from opsagent.stats import (
    SHORT_REFERENCE_RATIO,
    Reference,
    change_point,
    combine,
    reference,
    robust_spread,
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
