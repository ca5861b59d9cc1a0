"""Statistics over one time series: baseline against incident window, change point, peak.

Pure functions over ``[(unix_s, value), …]``. Robust to short baselines and missing samples:
where there is too little data to say, they say ``None`` rather than guess.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import accumulate, pairwise
from statistics import median
from typing import Literal

from opsagent import ranking

Sample = tuple[float, float]

#: Below this many baseline samples, a shift is not scored against the baseline alone.
MIN_BASELINE = 3
#: With fewer samples than that to compare against (coarse resolution, no history), only a shift
#: at least this large (either way) counts: there is no spread to judge a smaller one by.
SHORT_REFERENCE_RATIO = 1.5
#: A ratio that normally sits this close to its ceiling (availability, success ratio) is judged by
#: its shortfall: 99.9% -> 99% is ten times the failures, not a 1% dip.
NEAR_CEILING = 0.99


def between(samples: Sequence[Sample], start: float, end: float) -> list[float]:
    return [v for t, v in samples if start <= t < end]


#: From this many samples, the spread leaves out the one farthest from the centre.
SPIKE_FREE_FROM = 4


def robust_spread(values: Sequence[float], centre: float) -> float:
    """MAD scaled to a standard deviation, floored so a flat line does not make every wiggle huge."""
    if len(values) < 2:
        return max(abs(centre) * 0.1, 1e-9)
    mad = median(abs(v - centre) for v in values) * 1.4826
    # One spike among a handful of normal samples is not the series' spread: from four samples on,
    # the one farthest from the centre is left out of the standard deviation.
    spiky = len(values) >= SPIKE_FREE_FROM and ranking.on("spike_free")
    kept = sorted(values, key=lambda v: abs(v - centre))[:-1] if spiky else list(values)
    mean = sum(kept) / len(kept)
    std = math.sqrt(sum((v - mean) ** 2 for v in kept) / (len(kept) - 1))
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
    prefix = list(accumulate(values, initial=0.0))
    prefix_sq = list(accumulate([v * v for v in values], initial=0.0))
    best_t, best_score = None, 0.0
    total, total_sq = prefix[-1], prefix_sq[-1]
    # the candidates inside [start, end) are one run of the time-ordered points
    times = [t for t, _ in points]
    for i in range(max(min_side, bisect_left(times, start)), min(n - min_side + 1, bisect_left(times, end))):
        t = times[i]
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


def shift_direction(
    z: float | None, ratio: float | None, *, min_ratio: float = 1.15, max_ratio: float = 0.87
) -> Direction:
    if z is None or ratio is None:
        return "unknown"
    if z >= 3 and ratio >= min_ratio:
        return "up"
    if z <= -3 and ratio <= max_ratio:
        return "down"
    return "flat"


def sampling_step(samples: Sequence[Sample]) -> float:
    """The series' resolution: the median spacing of its samples (0 with fewer than two)."""
    times = sorted([t for t, _ in samples])
    gaps = [b - a for a, b in pairwise(times) if b > a]
    return median(gaps) if gaps else 0.0


@dataclass(frozen=True)
class Reference:
    """What a series is compared against: its normal level and spread."""

    centre: float
    spread: float
    short: bool = False  # too few samples for a spread: only a large shift counts
    samples: int = 0  # how many normal samples it was read from


def reference(
    samples: Sequence[Sample], *, baseline: tuple[float, float], window_start: float, onset: float
) -> Reference | None:
    """The normal level of a series before onset.

    Usually the baseline period. Two cases need the samples just before onset as well:

    * the baseline is another period (outside the window, before or after): a level the series had
      already moved to before onset is the normal the incident moved it from, not the incident;
    * the baseline holds too few samples for the series' resolution (5-minute data and a short
      or missing history): the pre-onset samples are all there is, judged without a spread.

    Pre-onset samples count only if their period ends by onset: at coarse resolution the sample
    stamped just before onset may already hold the incident. Against another period, though, even
    that sample is a better guide to the recent level than nothing; and a series with no sample at
    all from this period before onset is not judged against another period (``None``).
    """
    b0, b1 = baseline
    step = sampling_step(samples)
    base = between(samples, b0, b1)
    detached = is_detached(baseline, window_start=window_start, onset=onset)
    recent = _recent(samples, step, baseline=baseline, window_start=window_start, onset=onset)
    if not recent and detached:
        return None  # nothing from this period before onset: a shift and a change of period look alike
    if len(base) >= MIN_BASELINE:
        centre = median(base)
        spread = robust_spread(base, centre)
        if detached:
            now = median(recent)
            if abs(now - centre) > 3 * spread:
                scale = now / centre if centre > 0 and now > 0 else 1.0
                return Reference(now, max(spread * scale, abs(now) * 0.05, 1e-9), samples=len(recent))
        return Reference(centre, spread, samples=len(base))
    coarse = step > 0 and b1 - b0 < MIN_BASELINE * step
    pool = base + recent
    if pool and (detached or coarse):
        centre = median(pool)
        return Reference(centre, robust_spread(pool, centre), short=len(pool) < MIN_BASELINE, samples=len(pool))
    return None


def recent_samples(
    samples: Sequence[Sample], *, baseline: tuple[float, float], window_start: float, onset: float
) -> list[float]:
    """The samples of this period before onset (outside the baseline) whose period ends by onset;
    against another period, the one straddling onset when there is no other."""
    return _recent(samples, sampling_step(samples), baseline=baseline, window_start=window_start, onset=onset)


def _recent(
    samples: Sequence[Sample], step: float, *, baseline: tuple[float, float], window_start: float, onset: float
) -> list[float]:
    b0, b1 = baseline
    recent = [v for t, v in samples if window_start <= t and t + step <= onset and not b0 <= t < b1]
    if not recent and is_detached(baseline, window_start=window_start, onset=onset):
        # Only the sample that straddles onset: better than comparing with another period alone.
        recent = [v for t, v in samples if window_start <= t < onset and not b0 <= t < b1]
    return recent


def normal_runs(
    samples: Sequence[Sample], *, baseline: tuple[float, float], window_start: float, onset: float
) -> list[list[float]]:
    """The samples from before onset that :func:`reference` may read as normal, as runs of
    consecutive samples in time order: the baseline's, and this period's (a jump from one period to
    the other is not the series' jitter)."""
    ordered = sorted(samples)
    runs = [
        between(ordered, *baseline),
        recent_samples(ordered, baseline=baseline, window_start=window_start, onset=onset),
    ]
    return [r for r in runs if r]


def is_detached(baseline: tuple[float, float], *, window_start: float, onset: float) -> bool:
    """Whether the baseline is another period: outside the window, before it or after it."""
    return baseline[1] <= window_start or baseline[0] >= onset


def this_period(samples: Sequence[Sample], baseline: tuple[float, float]) -> list[Sample]:
    """The samples outside a detached baseline: a change between two periods is not the incident's."""
    return [(t, v) for t, v in samples if not baseline[0] <= t < baseline[1]]


def ceiling_of(unit: str | None) -> float | None:
    """The ceiling of a bounded ratio, from its unit."""
    return {"ratio": 1.0, "%": 100.0, "percent": 100.0}.get((unit or "").lower())


def shortfall_ratio(baseline: float | None, window: float | None, unit: str | None) -> float | None:
    """For a ratio that normally sits at its ceiling, how many times its shortfall grew (else None)."""
    ceiling = ceiling_of(unit)
    if ceiling is None or baseline is None or window is None or baseline < NEAR_CEILING * ceiling:
        return None
    return safe_ratio(ceiling - window, ceiling - baseline)


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
