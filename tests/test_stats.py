from opsagent.stats import change_point, combine, robust_spread, shift_direction


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
