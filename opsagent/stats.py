"""Statistics over one time series: baseline against incident window, change point, peak.

Pure functions over ``[(unix_s, value), …]``. Robust to short baselines and missing samples:
where there is too little data to say, they say ``None`` rather than guess.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from statistics import median
from typing import Literal

Sample = tuple[float, float]

#: Below this many baseline samples, a shift is not scored.
MIN_BASELINE = 3


def between(samples: Sequence[Sample], start: float, end: float) -> list[float]:
    return [v for t, v in samples if start <= t < end]


def robust_spread(values: Sequence[float], centre: float) -> float:
    """MAD scaled to a standard deviation, floored so a flat line does not make every wiggle huge."""
    if len(values) < 2:
        return max(abs(centre) * 0.1, 1e-9)
    mad = median(abs(v - centre) for v in values) * 1.4826
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return max(mad, std * 0.5, abs(centre) * 0.05, 1e-9)


def change_point(samples: Sequence[Sample], start: float, end: float, *, min_side: int = 3) -> float | None:
    """The time within [start, end) where the mean shifts most (standardised two-sample split).

    Candidates are split points inside the range; each side of the split uses every sample on
    that side of the whole series, so a short search range still compares long stretches.
    """
    points = sorted(samples)
    n = len(points)
    if n < 2 * min_side:
        return None
    values = [v for _, v in points]
    prefix = [0.0]
    prefix_sq = [0.0]
    for v in values:
        prefix.append(prefix[-1] + v)
        prefix_sq.append(prefix_sq[-1] + v * v)
    best_t, best_score = None, 0.0
    total, total_sq = prefix[-1], prefix_sq[-1]
    for i in range(min_side, n - min_side + 1):
        t = points[i][0]
        if not (start <= t < end):
            continue
        left_n, right_n = i, n - i
        left_mean = prefix[i] / left_n
        right_mean = (total - prefix[i]) / right_n
        left_var = max(prefix_sq[i] / left_n - left_mean**2, 0.0)
        right_var = max((total_sq - prefix_sq[i]) / right_n - right_mean**2, 0.0)
        pooled = math.sqrt((left_var + right_var) / 2) + 1e-9 + abs(left_mean) * 0.01
        score = abs(right_mean - left_mean) / pooled * math.sqrt(left_n * right_n / n)
        if score > best_score:
            best_t, best_score = t, score
    return best_t


Direction = Literal["up", "down", "flat", "unknown"]


def shift_direction(z: float | None, ratio: float | None) -> Direction:
    if z is None or ratio is None:
        return "unknown"
    if z >= 3 and ratio >= 1.15:
        return "up"
    if z <= -3 and ratio <= 0.87:
        return "down"
    return "flat"


def ts(unix_s: float) -> datetime:
    return datetime.fromtimestamp(unix_s, tz=UTC)


def safe_ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    if abs(b) < 1e-12:
        return None if abs(a) < 1e-12 else math.inf
    return a / b


def combine(series: Sequence[Sequence[Sample]], how: Literal["max", "sum", "mean"]) -> list[Sample]:
    """Merge several series (pods of a service) into one, timestamp by timestamp."""
    if len(series) == 1:
        return list(series[0])
    buckets: dict[float, list[float]] = {}
    for samples in series:
        for t, v in samples:
            buckets.setdefault(t, []).append(v)
    out: list[Sample] = []
    for t in sorted(buckets):
        vals = buckets[t]
        out.append((t, max(vals) if how == "max" else sum(vals) if how == "sum" else sum(vals) / len(vals)))
    return out
