"""Statistics over one time series: baseline against incident window, change point, peak.

Pure functions over ``[(unix_s, value), …]``. Robust to short baselines and missing samples:
where there is too little data to say, they say ``None`` rather than guess.
"""

from __future__ import annotations

import math
import mmap
import operator
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import reduce
from itertools import accumulate, pairwise
from statistics import median
from typing import Literal

import numpy as np

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


def in_order(values: Iterable[float]) -> float:
    """The values added one after another, from 0.0: as Python 3.11's ``sum`` adds floats, and as the
    batched figures (:func:`batch_figures`) add them on any Python (3.12's ``sum`` compensates)."""
    return reduce(operator.add, values, 0.0)


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
    mean = in_order(kept) / len(kept)
    std = math.sqrt(in_order((v - mean) ** 2 for v in kept) / (len(kept) - 1))
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
        try:
            left_var = max(prefix_sq[i] / left_n - left_mean**2, 0.0)
            right_var = max((total_sq - prefix_sq[i]) / right_n - right_mean**2, 0.0)
        except OverflowError:  # a mean beyond about 1e154 has no square in a float: no split is scored
            return None
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


# ---------------------------------------------------------------- many series at once

#: The change point is looked for from this long before onset (s): a fault shows within minutes of
#: the alert, and an earlier shift is another story.
CHANGE_SEARCH_BEFORE_S = 30 * 60.0


@dataclass(frozen=True)
class Figures:
    """What a scan reads of one series for an incident before it decides anything: the reference,
    the window's samples (how many, the largest, the mean of the lower half and of the upper half)
    and the change point."""

    reference: Reference | None
    window: int
    window_max: float | None
    low_half: float | None
    high_half: float | None
    change_point: float | None

    def worse_half(self, direction: str, centre: float | None) -> float | None:
        """The mean of the window's worse half: a 12-minute spike in a 30-minute window still shows.
        Which half is worse: the lower for a signal that fails downwards, the upper for one that fails
        upwards (or with nothing to compare with), else the one farther from ``centre``."""
        if self.low_half is None or self.high_half is None:
            return None
        if direction == "down":
            return self.low_half
        if direction == "up" or centre is None:
            return self.high_half
        return self.low_half if abs(self.low_half - centre) > abs(self.high_half - centre) else self.high_half


def series_figures(
    samples: Sequence[Sample], *, baseline: tuple[float, float], window_start: float, onset: float, end: float
) -> Figures:
    """One series' figures, by the functions above: the definition :func:`batch_figures` equals."""
    win = between(samples, onset, end)
    ordered = sorted(win)
    half = max(1, len(ordered) // 2)
    detached = is_detached(baseline, window_start=window_start, onset=onset)
    searched = this_period(samples, baseline) if detached else samples
    return Figures(
        reference=reference(samples, baseline=baseline, window_start=window_start, onset=onset),
        window=len(win),
        window_max=max(win) if win else None,
        low_half=in_order(ordered[:half]) / half if win else None,
        high_half=in_order(ordered[-half:]) / half if win else None,
        change_point=change_point(searched, onset - CHANGE_SEARCH_BEFORE_S, end),
    )


#: A series holding a value or time larger than this is left to :func:`series_figures`: far inside
#: the float range, so that no square or sum in a batch overflows (where the batch and the functions
#: above could part ways on infinities and NaN).
BATCH_MAGNITUDE = 1e100


@dataclass(frozen=True)
class BatchFigures:
    """The figures of many series, computed at once (:func:`batch_figures`), and the pairs of
    consecutive normal samples of each (within one run of :func:`normal_runs`), whose jumps the
    peers' noise pools: ``jumps_of[k]`` is the series of the pair ``(jumps_from[k], jumps_to[k])``.
    Each series' figures are held as a row of numbers and made when asked for, one at a time: not
    an object per series kept through the whole scan."""

    measured: np.ndarray  # a row a series: what _row_figures measured, NaN for a series not batched
    baseline: tuple[float, float]
    detached: bool
    jumps_from: np.ndarray
    jumps_to: np.ndarray
    jumps_of: np.ndarray

    def __len__(self) -> int:
        return len(self.measured)

    def normals(self) -> tuple[list[float], list[float]]:
        """Each series' count of normal samples (:func:`normal_runs`, every run) and their median
        (NaN for a series not batched; the median NaN too where there are none)."""
        return (self.measured[:, 0] + self.measured[:, 1]).tolist(), self.measured[:, 4].tolist()

    def figures(self, index: int) -> Figures | None:
        """The figures of the series at ``index`` (None: not batched, left to :func:`series_figures`)."""
        n_base, n_recent, base_m, recent_m, pool_m, spread, step, n_win, top, low, high, cp = self.measured[
            index
        ].tolist()
        if math.isnan(n_base):
            return None
        nb, nr, nw = int(n_base), int(n_recent), int(n_win)
        return Figures(
            reference=_reference(
                nb, nr, base_m, recent_m, pool_m, spread, step, baseline=self.baseline, detached=self.detached
            ),
            window=nw,
            window_max=top if nw else None,
            low_half=low if nw else None,
            high_half=high if nw else None,
            change_point=None if math.isnan(cp) else cp,
        )


def batch_figures(
    many: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    baseline: tuple[float, float],
    window_start: float,
    onset: float,
    end: float,
) -> BatchFigures:
    """:func:`series_figures` of many series at once, each given as its column of times and its column
    of values (float64, in its order), equal to the bit. The heavy parts run over many series
    together (:data:`BATCH_SAMPLES` at a time), the series padded into rows of a power of two (so at
    most twice the samples); only the choices between cases are made one series at a time. The
    same IEEE operations in the same order: sums by running sums along a row (added in order, as
    :func:`in_order` adds), squares by ``float_power`` (the C library's ``pow``, as Python's ``**``;
    numpy's own square and ``power`` round some values differently), medians and sorts as
    :mod:`statistics` takes them, ties kept in their order by stable sorts. A series whose times do
    not strictly increase (so that sorting would reorder it), or holding a negative zero (which ties
    with zero but prints otherwise), or a value beyond :data:`BATCH_MAGNITUDE`, is not batched: its
    figures are None, for the caller to compute one by one."""
    lengths = np.fromiter((len(ts) for ts, _ in many), dtype=np.int64, count=len(many))
    measured = np.full((len(many), _MEASURED), np.nan)
    # a series has fewer pairs of consecutive samples than samples: room for every pair, filled in turn
    total = int(lengths.sum())
    jumps_from, jumps_to, jumps_of = scratch(total), scratch(total), scratch(total, np.int32)
    filled = 0
    widths = np.where(lengths > 1, 1 << np.ceil(np.log2(np.maximum(lengths, 1))).astype(np.int64), 1)
    for width in sorted(set(widths[lengths > 0].tolist())):  # (numpy.unique would import numpy.ma)
        of_width = np.flatnonzero((widths == width) & (lengths > 0))
        per = max(1, BATCH_SAMPLES // width)
        for first in range(0, len(of_width), per):
            rows = of_width[first : first + per]
            rows, t, v = _padded(many, rows, lengths[rows], width)
            if not len(rows):
                continue
            measured[rows], (a, b, row) = _row_figures(
                t, v, lengths[rows], baseline=baseline, window_start=window_start, onset=onset, end=end
            )
            jumps_from[filled : filled + len(a)], jumps_to[filled : filled + len(a)] = a, b
            jumps_of[filled : filled + len(a)] = rows[row]
            filled += len(a)
    detached = is_detached(baseline, window_start=window_start, onset=onset)
    return BatchFigures(measured, baseline, detached, jumps_from[:filled], jumps_to[:filled], jumps_of[:filled])


#: How many numbers _row_figures measures of a series.
_MEASURED = 12


#: A batch computes this many samples' figures at a time (rows of series padded to one width): each
#: of its working arrays stays at 64 KiB, so a scan's working memory is a few MiB however many series
#: there are (all at once, ten thousand series of 64 samples raised the x16 command's peak by 50 MiB).
BATCH_SAMPLES = 1 << 13


def scratch(size: int, dtype: type = np.float64) -> np.ndarray:
    """An array in memory of its own (an anonymous map), given back to the system once freed rather
    than left in the heap, where later and smaller allocations would split it."""
    return np.frombuffer(mmap.mmap(-1, max(1, size * np.dtype(dtype).itemsize)), dtype=dtype, count=size)


def _padded(
    many: Sequence[tuple[np.ndarray, np.ndarray]], rows: np.ndarray, lengths: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The series at ``rows`` that a batch can take, padded into rows of ``width``: those rows, their
    times (infinite in the padding) and their values (0 there). A series is left out where its times
    do not strictly increase, or it holds a negative zero or a number beyond BATCH_MAGNITUDE."""
    times = np.concatenate([many[i][0] for i in rows.tolist()]).astype(np.float64, copy=False)
    values = np.concatenate([many[i][1] for i in rows.tolist()]).astype(np.float64, copy=False)
    starts = np.cumsum(lengths) - lengths
    odd = (np.signbit(values) & (values == 0)) | ~(np.abs(values) <= BATCH_MAGNITUDE)
    odd |= ~(np.abs(times) <= BATCH_MAGNITUDE)
    later = np.ones(len(times), dtype=bool)  # every sample but the first of its series
    later[starts] = False
    odd[1:] |= later[1:] & (times[1:] <= times[:-1])
    plain = np.bincount(np.repeat(np.arange(len(rows)), lengths)[odd], minlength=len(rows)) == 0
    col = np.arange(width)
    valid = col < lengths[plain][:, None]
    at = np.where(valid, starts[plain][:, None] + col, 0)
    return rows[plain], np.where(valid, times[at], np.inf), np.where(valid, values[at], 0.0)


def _row_figures(
    t: np.ndarray,
    v: np.ndarray,
    n: np.ndarray,
    *,
    baseline: tuple[float, float],
    window_start: float,
    onset: float,
    end: float,
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """What the figures of series padded into rows are made of, a row of numbers a series (which
    number is what: :meth:`BatchFigures.figures`), and the pairs of consecutive normal samples (from,
    to, row). The series are given as times ``t`` (infinite in the padding), values ``v`` and
    ``n`` samples each, in time order. Each step names the function above it stands for."""
    b0, b1 = baseline
    col = np.arange(t.shape[1])
    valid = col < n[:, None]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        # sampling_step: the median gap between consecutive samples (every gap positive here)
        gaps = np.sort(np.where(col[1:] < n[:, None], t[:, 1:] - t[:, :-1], np.inf), axis=1)
        step = np.where(n > 1, _medians(gaps, n - 1), 0.0)
        # reference and normal_runs: the baseline's samples, then this period's before onset (_recent)
        base = valid & (b0 <= t) & (t < b1)
        before = valid & (window_start <= t) & ~base
        recent: np.ndarray = before & (t + step[:, None] <= onset)
        detached = is_detached(baseline, window_start=window_start, onset=onset)
        if detached:  # only the sample that straddles onset, where there is no other
            recent = np.where(np.any(recent, axis=1)[:, None], recent, before & (t < onset))
        n_base, n_recent = base.sum(axis=1), recent.sum(axis=1)
        n_pool = n_base + n_recent
        # the pool in its order (the baseline's, then this period's), for the spread's ties and sums;
        # medians need no order, only the samples (int8 keys: a stable sort of small integers is a radix sort)
        which = np.where(base, 0, np.where(recent, 1, 2)).astype(np.int8)
        pool = _take(v, np.argsort(which, axis=1, kind="stable"))
        base_median = _medians(np.sort(np.where(base, v, np.inf), axis=1), n_base)
        pool_median = _medians(np.sort(np.where(which < 2, v, np.inf), axis=1), n_pool)
        recent_median = _medians(np.sort(np.where(recent, v, np.inf), axis=1), n_recent)
        # robust_spread of the baseline where it has enough samples, else of the whole pool
        own = n_base >= MIN_BASELINE
        spread = _spreads(pool, np.where(own, n_base, n_pool), np.where(own, base_median, pool_median))
        # the window: between(onset, end), its largest sample and the means of its halves
        inside = valid & (onset <= t) & (t < end)
        n_win = inside.sum(axis=1)
        win = np.sort(np.where(inside, v, np.inf), axis=1)
        win_max = _take(win, np.maximum(n_win - 1, 0)[:, None])[:, 0]
        half = np.maximum(1, n_win // 2)
        kept = col < half[:, None]
        low = _added(np.where(kept, win, 0.0)) / half
        upper = _take(win, np.minimum(np.maximum(n_win - half, 0)[:, None] + col, len(col) - 1))
        high = _added(np.where(kept, upper, 0.0)) / half
        points = valid & ~base if detached else valid  # this_period where the baseline is another one
        first = np.argsort(~points, axis=1, kind="stable")  # those points first, in their order
        change = _change_points(_take(t, first), _take(v, first), points.sum(axis=1), onset, end)
    measured = np.column_stack(
        (n_base, n_recent, base_median, recent_median, pool_median, spread, step, n_win, win_max, low, high, change)
    )
    # normal_runs' jumps: consecutive samples of the pool, but not from the baseline's last to this
    # period's first (a jump from one period to the other is not the series' jitter)
    follows = (col[:-1] < (n_pool - 1)[:, None]) & (col[:-1] != (n_base - 1)[:, None])
    return measured, (pool[:, :-1][follows], pool[:, 1:][follows], np.nonzero(follows)[0])


def _reference(
    n_base: int,
    n_recent: int,
    base_median: float,
    recent_median: float,
    pool_median: float,
    spread: float,
    step: float,
    *,
    baseline: tuple[float, float],
    detached: bool,
) -> Reference | None:
    """:func:`reference`'s choices, from the figures the batch computed for them."""
    if not n_recent and detached:
        return None
    if n_base >= MIN_BASELINE:
        centre = base_median
        if detached:
            now = recent_median
            if abs(now - centre) > 3 * spread:
                scale = now / centre if centre > 0 and now > 0 else 1.0
                return Reference(now, max(spread * scale, abs(now) * 0.05, 1e-9), samples=n_recent)
        return Reference(centre, spread, samples=n_base)
    coarse = step > 0 and baseline[1] - baseline[0] < MIN_BASELINE * step
    pool = n_base + n_recent
    if pool and (detached or coarse):
        return Reference(pool_median, spread, short=pool < MIN_BASELINE, samples=pool)
    return None


def _take(rows: np.ndarray, at: np.ndarray) -> np.ndarray:
    return np.take_along_axis(rows, at, axis=1)


def _added(rows: np.ndarray) -> np.ndarray:
    """Each row's sum, added in order (a running sum's last value: numpy's ``sum`` adds pairwise)."""
    return np.cumsum(rows, axis=1)[:, -1] if rows.shape[1] else np.zeros(len(rows))


def _medians(ordered: np.ndarray, count: np.ndarray) -> np.ndarray:
    """:func:`statistics.median` of each row's first ``count`` entries, the row sorted (NaN where none)."""
    if not ordered.shape[1]:
        return np.full(len(ordered), np.nan)
    half = count // 2
    upper = _take(ordered, np.minimum(half, ordered.shape[1] - 1)[:, None])[:, 0]
    lower = _take(ordered, np.clip(half - 1, 0, ordered.shape[1] - 1)[:, None])[:, 0]
    middle = np.where(count % 2 == 1, upper, (lower + upper) / 2)
    return np.where(count > 0, middle, np.nan)


def _squares(x: np.ndarray) -> np.ndarray:
    """``x ** 2`` as Python computes it (the C library's ``pow``), for each entry."""
    return np.float_power(x, np.full(x.shape, 2.0))


def _spreads(values: np.ndarray, count: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """:func:`robust_spread` of each row's first ``count`` values about its ``centre``."""
    col = np.arange(values.shape[1])
    inside = col < count[:, None]
    deviation = np.where(inside, np.abs(values - centre[:, None]), np.inf)
    mad = _medians(np.sort(deviation, axis=1), count) * 1.4826
    spiky = (count >= SPIKE_FREE_FROM) & ranking.on("spike_free")
    by_deviation = _take(values, np.argsort(deviation, axis=1, kind="stable"))  # the farthest last
    size = np.where(spiky, count - 1, count)
    chosen = col < size[:, None]
    kept = np.where(chosen, np.where(spiky[:, None], by_deviation, values), 0.0)
    mean = _added(kept) / size
    std = np.sqrt(_added(np.where(chosen, _squares(kept - mean[:, None]), 0.0)) / (size - 1))
    spread = np.maximum(np.maximum(np.maximum(mad, std * 0.5), np.abs(centre) * 0.05), 1e-9)
    return np.where(count < 2, np.maximum(np.abs(centre) * 0.1, 1e-9), spread)


def _change_points(
    times: np.ndarray, values: np.ndarray, count: np.ndarray, onset: float, end: float, *, min_side: int = 3
) -> np.ndarray:
    """:func:`change_point` of each row's first ``count`` samples (time order) in the search range
    before ``onset`` to ``end`` (NaN where none): every split at once, over the columns where any row
    has a candidate."""
    col = np.arange(times.shape[1])
    inside = col < count[:, None]
    kept = np.where(inside, values, 0.0)
    zero = np.zeros((len(kept), 1))
    prefix = np.cumsum(np.hstack((zero, kept)), axis=1)  # as accumulate(values, initial=0.0)
    prefix_sq = np.cumsum(np.hstack((zero, kept * kept)), axis=1)
    total, total_sq = _take(prefix, count[:, None]), _take(prefix_sq, count[:, None])
    # bisect_left: how many of the samples lie before each bound
    first = np.maximum(min_side, (inside & (times < onset - CHANGE_SEARCH_BEFORE_S)).sum(axis=1))
    last = np.minimum(count - min_side + 1, (inside & (times < end)).sum(axis=1))
    split = col[first.min() : max(first.min(), last.max())]
    if not len(split):
        return np.full(len(kept), np.nan)
    prefix, prefix_sq = prefix[:, split], prefix_sq[:, split]
    left_n, right_n = split[None, :], count[:, None] - split[None, :]
    left_mean = prefix / left_n
    right_mean = (total - prefix) / right_n
    left_var = np.maximum(prefix_sq / left_n - _squares(left_mean), 0.0)
    right_var = np.maximum((total_sq - prefix_sq) / right_n - _squares(right_mean), 0.0)
    pooled = np.sqrt((left_var + right_var) / 2) + 1e-9 + np.abs(left_mean) * 0.01
    score = np.abs(right_mean - left_mean) / pooled * np.sqrt(left_n * right_n / count[:, None])
    candidate = (split >= first[:, None]) & (split < last[:, None]) & ~np.isnan(score)
    score = np.where(candidate, score, -np.inf)
    best = np.argmax(score, axis=1)[:, None]  # the first of the highest, as the loop keeps it
    found = (count >= 2 * min_side) & (_take(score, best)[:, 0] > 0)
    return np.where(found, _take(times, split[best])[:, 0], np.nan)
