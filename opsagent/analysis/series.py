"""Statistics of metric series for an incident: baseline against window, change point, ceiling.

Pure functions over the recorded-incident models (:class:`~opsagent.fixtures.MetricSeries`): the
replay sources compute them from a recording, the live sources from what a reader fetched, so an
investigation sees the same observation live and in replay. No I/O here.
"""

from __future__ import annotations

import hashlib
import math
import re
from array import array
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache, partial
from itertools import pairwise
from statistics import median
from typing import Any, Literal

import numpy as np

from opsagent import ranking
from opsagent.analysis.gaps import MIN_PAIRED, MS_PER_UNIT
from opsagent.catalog import SignalCatalog
from opsagent.fixtures import MetricSeries, Samples, SignalDef, unix
from opsagent.models import CallGap, Incident, SeriesStats, TimeRange
from opsagent.naming import meaning_of
from opsagent.stats import (
    BATCH_SAMPLES,
    NEAR_CEILING,
    SHORT_REFERENCE_RATIO,
    BatchFigures,
    Figures,
    Sample,
    batch_figures,
    between,
    ceiling_of,
    combine,
    normal_runs,
    reference,
    safe_ratio,
    sampling_step,
    scratch,
    series_figures,
    shift_direction,
    ts,
)

SERVICE_LABELS = ("service", "app", "application", "service_name", "job", "component", "container")
_POD_SUFFIX = re.compile(r"^(.*?)(?:-[a-z0-9]{6,10})?-[a-z0-9]{5}$|^(.*?)-\d+$")


def rollup(name: str, services: set[str]) -> str:
    """The service a pod or instance name belongs to."""
    best = max((s for s in services if name == s or name.startswith(s + "-")), key=len, default=None)
    if best:
        return best
    m = _POD_SUFFIX.match(name)
    return (m.group(1) or m.group(2)) if m else name


def component_of(labels: dict[str, str], services: set[str]) -> str:
    if "callee" in labels:
        return labels["callee"]
    for label in SERVICE_LABELS:
        if label in labels:
            return labels[label]
    for label in ("pod", "instance", "pod_name"):
        if label in labels:
            return rollup(labels[label].split(":")[0], services)
    return labels.get("__name__", "unknown")


def is_counter(name: str, kind: str | None) -> bool:
    """A series is a counter when it says so, or, saying nothing, when its name ends in ``_total``."""
    return kind == "counter" or (kind is None and name.endswith("_total"))


def as_rate(series: MetricSeries, default_type: str | None = None) -> Samples:
    """Counters become per-sample increases (reset-aware): each sample less the one before, or itself
    where the counter went down (a reset); gauges pass through, their own samples (not a copy)."""
    samples = series.samples
    if not is_counter(series.name, series.type or default_type):
        return samples
    before, now = samples.values[:-1], samples.values[1:]
    return Samples.of_columns(samples.times[1:], np.where(now >= before, now - before, now))


#: A ceiling as a signal's stats take it: a constant, a series (the ceiling in force at each time), or none.
Limit = list[Sample] | float | None


def ceiling_series(matched: Sequence[MetricSeries], agg: Literal["max", "sum", "mean"]) -> Limit:
    """The ceiling series, combined across pods the same way as the signal it bounds."""
    return combine([as_rate(m) for m in matched], agg) if matched else None


def signal_stats(
    matched: Sequence[MetricSeries],
    *,
    query: str,
    signal: str,
    component: str,
    spec: SignalDef,
    incident: Incident,
    limit: Limit,
    peers: PeerNoise | None = None,
) -> SeriesStats:
    """Statistics of the series a query matched, pods combined by the signal's aggregation."""
    samples = combine([as_rate(m, spec.type) for m in matched], spec.agg)
    return series_stats(
        samples,
        incident=incident,
        signal=signal,
        component=component,
        query=query,
        spec=spec,
        series=len(matched),
        limit=limit,
        peers=peers,
    )


#: Label values that say which end of a call edge measured it: the caller's (client) or the callee's
#: (server). Istio's ``reporter``, OpenTelemetry's span kind and plain words alike.
CLIENT_SIDES = frozenset({"source", "client", "caller", "outbound", "downstream"})
SERVER_SIDES = frozenset({"destination", "server", "callee", "inbound", "upstream"})
SIDE_LABELS = ("side", "reporter", "direction", "span_kind", "kind")
#: Metric-name prefixes of node- and host-level exporters (node_exporter, Windows, host metrics):
#: the figure is the machine's, shared by every pod on it.
NODE_PREFIXES = ("node_", "host_", "machine_", "windows_")
#: Labels that name a node or host.
NODE_LABELS = ("node", "nodename", "kubernetes_node", "host", "hostname")


def side_of(labels: dict[str, str]) -> Literal["client", "server"] | None:
    for label in SIDE_LABELS:
        value = labels.get(label, "").lower()
        if value in CLIENT_SIDES:
            return "client"
        if value in SERVER_SIDES:
            return "server"
    return None


#: Name words of a component's view of the calls it makes, and of time taken: together, the latency
#: of its dependencies as it waits for them (a client's connection pool is its own resource).
_OUTBOUND = re.compile(r"(?:^|_)(?:client|outbound|downstream|egress)(?:_|$)")
_TIME_TAKEN = re.compile(r"(?:^|_)(?:latency|duration|response_time|rtt)(?:_|$)")


def is_outbound(name: str, labels: dict[str, str]) -> bool:
    """A component's latency for the calls it makes, not for the work it does (a per-pod client-side
    latency): evidence about its dependencies. A series of one call edge says so by its labels."""
    named = _OUTBOUND.search(name) is not None and _TIME_TAKEN.search(name) is not None
    return "callee" not in labels and named and ranking.on("outbound")


def is_node_series(name: str) -> bool:
    """A node's or host's figure (node_exporter's naming), not the service's own."""
    return name.startswith(NODE_PREFIXES) and ranking.on("node_scope")


def node_of(labels: dict[str, str], samples: Sequence[Sample]) -> str:
    """The node a node-level series belongs to: its label, or else a fingerprint of its values (the
    same node's series, repeated for every pod on it, carry the same values)."""
    for label in NODE_LABELS:
        if labels.get(label):
            return labels[label]
    digest = hashlib.sha1(",".join(f"{t:.0f}:{v:.6g}" for t, v in samples).encode()).hexdigest()[:8]
    return f"node-{digest}"


@dataclass(frozen=True)
class ScanGroup:
    """The series of one metric of one component: of one call edge and side, for edge metrics."""

    component: str
    metric: str
    caller: str
    members: list[Sequence[Sample]]
    side: Literal["client", "server"] | None = None
    node: str | None = None
    outbound: bool = False

    @property
    def scope(self) -> Literal["service", "edge", "node", "outbound"]:
        if self.node is not None:
            return "node"
        return "edge" if self.caller else "outbound" if self.outbound else "service"

    def spec(self, catalog: SignalCatalog) -> tuple[str | None, SignalDef]:
        signal = catalog.signal_of(self.metric)
        found = catalog.get(signal) if signal else None
        return signal, found or catalog.unlisted(self.metric)

    def limit_query(self, catalog: SignalCatalog) -> str | None:
        _, spec = self.spec(catalog)
        return spec.limit.replace("$service", self.component) if spec.limit else None


def scan_groups(series: Iterable[tuple[MetricSeries, str, Sequence[Sample]]]) -> list[ScanGroup]:
    """Series grouped by component, metric, caller and side, in a stable order. Node-level series
    are grouped by node as well, so a node's figure is read once per component on it."""
    groups: dict[tuple[str, str, str, str, str], list[Sequence[Sample]]] = defaultdict(list)
    outbound: set[str] = set()
    for s, component, samples in series:
        node = node_of(s.labels, s.samples) if is_node_series(s.name) else ""
        groups[(component, s.name, s.labels.get("caller", ""), side_of(s.labels) or "", node)].append(samples)
        if is_outbound(s.name, s.labels):
            outbound.add(s.name)
    return [
        ScanGroup(c, m, e, members, side=side or None, node=node or None, outbound=m in outbound)  # type: ignore[arg-type]
        for (c, m, e, side, node), members in sorted(groups.items())
    ]


def partners(groups: Sequence[ScanGroup]) -> dict[int, ScanGroup]:
    """For each caller-side group of a call edge's metric, the callee-side group of the same edge and
    metric (by position in ``groups``): the two ends' views of the same calls. Only an edge measured by
    one series at each end: the difference of two aggregates (pods, versions) is no call's time between
    the ends."""
    servers = {
        (g.caller, g.component, g.metric): g for g in groups if g.caller and g.side == "server" and len(g.members) == 1
    }
    return {
        i: servers[(g.caller, g.component, g.metric)]
        for i, g in enumerate(groups)
        if g.caller and g.side == "client" and len(g.members) == 1 and (g.caller, g.component, g.metric) in servers
    }


def paired_gap(
    client: Sequence[Sample],
    server: Sequence[Sample],
    *,
    incident: Incident,
    caller: str,
    callee: str,
    unit: str | None,
) -> CallGap | None:
    """The time a call edge's calls spend between its two ends, from its latency measured at both: the
    caller's view less the callee's, sample by sample (each caller sample paired with the callee sample
    nearest in time, within half the series' resolution), before onset (as any series' reference) and
    after. What two views of the same calls share (a slow callee, load on both) cancels out, so the
    difference moves where the time is lost on the way, even where either view alone is too noisy
    to judge. None for an edge not in a time unit, or with too few paired samples."""
    scale = MS_PER_UNIT.get((unit or "").lower())
    if scale is None or not client or not server:
        return None
    times = sorted(t for t, _ in server)
    value = dict(server)
    half = sampling_step(client) / 2
    gaps: list[Sample] = []
    for t, v in sorted(client):
        i = bisect_right(times, t)
        near = min(times[max(i - 1, 0) : i + 1], key=lambda s: (abs(s - t), s))
        if abs(near - t) <= half:
            gaps.append((t, v - value[near]))
    b0, b1 = unix(incident.baseline.start), unix(incident.baseline.end)
    onset, end = unix(incident.onset), unix(incident.window.end)
    ref = reference(gaps, baseline=(b0, b1), window_start=unix(incident.window.start), onset=onset)
    after = between(gaps, onset, end)
    if ref is None or ref.samples < MIN_PAIRED or len(after) < MIN_PAIRED:
        return None
    return CallGap(
        caller=caller,
        callee=callee,
        calls_baseline=ref.samples,
        calls_window=len(after),
        gap_ms_baseline=round(ref.centre * scale, 3),
        gap_ms_window=round(median(after) * scale, 3),
        spread_ms_baseline=round(ref.spread * scale, 3),
    )


def scan_stats(
    group: ScanGroup,
    *,
    catalog: SignalCatalog,
    incident: Incident,
    limit: Limit,
    peers: PeerNoise | None = None,
    partner: ScanGroup | None = None,
    scanned: tuple[Sequence[Sample], Figures | None] | None = None,
) -> SeriesStats:
    """One group's statistics; for the caller's side of an edge whose callee's side is ``partner`` (as
    :func:`partners` pairs them), with the gap between the two (:func:`paired_gap`) where the metric
    measures time taken. ``scanned``: the group's combined samples and figures, where a scan has
    them already (:class:`ScanFigures`)."""
    signal, spec = group.spec(catalog)
    edge, component = group.caller, group.component
    side = f', side="{group.side}"' if group.side else ""
    label = f'{{caller="{edge}", callee="{component}"{side}}}' if edge else f'{{service="{component}"}}'
    gap = None
    if partner is not None and meaning_of(group.metric) == "latency":
        gap = paired_gap(
            group.members[0],
            partner.members[0],
            incident=incident,
            caller=edge,
            callee=component,
            unit=spec.unit,
        )
    # one by one: the members combined into a list, read several times over
    samples, figures = scanned or (combine(group.members, "max" if group.node else spec.agg), None)
    named = {"signal": signal or group.metric, "component": component, "query": group.metric + label}
    try:
        stats = series_stats(
            samples,
            figures=figures,
            incident=incident,
            spec=spec,
            series=len(group.members),
            limit=limit,
            peers=peers,
            **named,
        )
    except OverflowError:
        # values beyond about 1e154 have no square in a float: this series cannot be measured, the
        # rest of the scan can (it used to fail whole)
        stats = SeriesStats.unmeasured(**named, unit=spec.unit, series=len(group.members))
    # a copy, not the fields given to the constructor: validation grows the model's dict field by
    # field, and a copy's is sized to fit (x16: 31.8 MiB of statistics against 21.3)
    return stats.model_copy(
        update={"scope": group.scope, "caller": edge or None, "side": group.side, "node": group.node, "gap": gap}
    )


#: A shift counts only if fewer than this share of the metric's own deviations before onset, pooled
#: over every component that has it, are as large: a shift its peers make all the time is weather.
PEER_SURPRISE = 0.05
#: Fewer pooled deviations than this, and the peers are not asked.
MIN_PEER_DEVIATIONS = 8
#: A series with at least this many normal samples shows its own noise: its peers are not asked
#: (partial pooling: the less a series says of itself, the more its peers say for it).
PEER_POOLING_BELOW = 8


@dataclass(frozen=True)
class PeerNoise:
    """How far one metric jumps from one sample to the next before onset, pooled over every component
    that has it. With two to five samples before onset a series cannot show its own noise; its
    peers (the same metric of the other services, the same exporter, the same resolution) can:
    partial pooling, so "x3" means something different for a jittery per-pod percentile than for
    a steady CPU figure."""

    # |log(sample / the sample before)| of normal samples, sorted; held as an array of doubles (8 bytes
    # each, where a float object takes 32 and there is one for every sample of the metric before onset)
    deviations: Sequence[float]
    floor: float  # levels below this count as this (no log of zero)

    def surprise(self, level: float, centre: float) -> float | None:
        """The share of the pooled deviations at least as large as level's from centre (None: too few)."""
        if len(self.deviations) < MIN_PEER_DEVIATIONS or level < 0 or centre < 0:
            return None
        shift = abs(math.log((level + self.floor) / (centre + self.floor)))
        larger = len(self.deviations) - bisect_right(self.deviations, shift - 1e-12)
        return larger / len(self.deviations)


def combined(group: ScanGroup, catalog: SignalCatalog) -> Sequence[Sample]:
    """A group's members as one series, by its metric's aggregation (a node's figure, repeated for
    every pod on it, by its largest): one member as it is, not a copy."""
    if len(group.members) == 1:
        return group.members[0]
    _, spec = group.spec(catalog)
    return combine(group.members, "max" if group.node else spec.agg)


def _window(incident: Incident) -> dict[str, Any]:
    """The times a series' figures are read at: the baseline, the window's start, onset, the window's end."""
    baseline, window_start, onset, end = _times(incident.baseline, incident.window, incident.onset)
    return {"baseline": baseline, "window_start": window_start, "onset": onset, "end": end}


@lru_cache(maxsize=16)  # read once per group of a scan: the same few incidents' times every time
def _times(baseline: TimeRange, window: TimeRange, onset: datetime) -> tuple[tuple[float, float], float, float, float]:
    return (unix(baseline.start), unix(baseline.end)), unix(window.start), unix(onset), unix(window.end)


def _columns(samples: Sequence[Sample]) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(samples, Samples):
        return samples.times, samples.values
    return np.array([t for t, _ in samples], dtype=np.float64), np.array([v for _, v in samples], dtype=np.float64)


@dataclass(frozen=True)
class ScanFigures:
    """Every group's samples, its members combined, and their figures for one incident, computed for
    all the groups at once (:func:`~opsagent.stats.batch_figures`): the peers' noise and each group's
    statistics read them, so that a group is combined and measured once, not once for each."""

    samples: list[Sequence[Sample]]
    batch: BatchFigures

    def of(self, index: int) -> tuple[Sequence[Sample], Figures | None]:
        """The samples and figures of the group at ``index`` (figures None: to be computed one by one)."""
        return self.samples[index], self.batch.figures(index)


def scan_figures(groups: Sequence[ScanGroup], *, catalog: SignalCatalog, incident: Incident) -> ScanFigures:
    """Each group's members combined once, and every group's figures for ``incident`` at once."""
    samples = [combined(g, catalog) for g in groups]
    return ScanFigures(samples, batch_figures([_columns(s) for s in samples], **_window(incident)))


def peer_noise(
    groups: Iterable[ScanGroup],
    *,
    catalog: SignalCatalog,
    incident: Incident,
    scanned: ScanFigures | None = None,
) -> dict[tuple[str, str | None], PeerNoise]:
    """Per metric (and side of a call edge), the pooled jumps between consecutive normal samples.
    ``scanned``: the groups' figures, where a scan has them already."""
    groups = list(groups)
    scanned = scanned or scan_figures(groups, catalog=catalog, incident=incident)
    window = _window(incident)
    del window["end"]
    runs_of: dict[tuple[str, str | None], list[list[float]]] = defaultdict(list)  # of groups not batched
    levels_of: dict[tuple[str, str | None], list[float]] = defaultdict(list)
    floors: dict[tuple[str, str | None], float] = {}
    numbers: dict[tuple[str, str | None], int] = {}
    number_of = np.full(len(groups), -1, dtype=np.int32)  # each group's metric and side, as a number
    counts, medians = scanned.batch.normals()
    for i, g in enumerate(groups):
        runs: list[list[float]] = []
        count, level = counts[i], medians[i]
        if math.isnan(count):  # not batched
            runs = normal_runs(scanned.samples[i], **window)
            values = [v for run in runs for v in run]
            count, level = len(values), median(values) if values else math.nan
        if count >= 2:
            key: tuple[str, str | None] = (g.metric, g.side)
            runs_of[key].extend(runs)
            levels_of[key].append(level)
            if key not in numbers:  # a metric's smallest effect is its catalog entry's: one for every group of it
                floors[key] = min_effect(g.spec(catalog)[1])
                numbers[key] = len(numbers)
            number_of[i] = numbers[key]
    floor_of = np.zeros(len(numbers))
    for key, number in numbers.items():
        levels = sorted(levels_of[key])
        typical = levels[len(levels) // 2]
        # Where the unit says nothing, a twentieth of the metric's typical level is as small as counts.
        floor_of[number] = max(floors[key], PEER_FLOOR_SHARE * abs(typical), 1e-9)
    # the batched groups' jumps, every metric's together: each level floored, then |log(b / a)| by
    # math.log (numpy's log rounds some values differently), a slice at a time (a float object a jump
    # while it is logged); then sorted within each metric
    batch = scanned.batch
    of = number_of[batch.jumps_of]
    jumps = scratch(len(of))
    for first in range(0, len(of), BATCH_SAMPLES):
        part = slice(first, first + BATCH_SAMPLES)
        floor = floor_of[of[part]]
        ratios = (np.maximum(batch.jumps_to[part], 0.0) + floor) / (np.maximum(batch.jumps_from[part], 0.0) + floor)
        jumps[part] = np.abs(np.fromiter(map(math.log, ratios.tolist()), dtype=np.float64, count=len(ratios)))
    order = np.argsort(of, kind="stable")  # by metric
    bounds = np.concatenate(([0], np.cumsum(np.bincount(of, minlength=len(numbers)))))
    out: dict[tuple[str, str | None], PeerNoise] = {}
    for key, runs in runs_of.items():
        number = numbers[key]
        batched = np.sort(jumps[order[bounds[number] : bounds[number + 1]]])
        low = float(floor_of[number])
        # each level floored once, not once for each of the two jumps it takes part in
        more = [abs(math.log(b / a)) for run in runs for a, b in pairwise([max(v, 0.0) + low for v in run])]
        deviations = array("d", [0.0]) * (len(batched) + len(more))  # sized to fit, as from a list
        np.frombuffer(deviations, dtype=np.float64)[:] = np.sort(np.concatenate((batched, more))) if more else batched
        out[key] = PeerNoise(deviations, low)
    return out


#: Where a metric's unit gives no smallest effect, this share of its typical level stands in.
PEER_FLOOR_SHARE = 0.05


def series_stats(
    samples: Sequence[Sample],
    *,
    incident: Incident,
    signal: str,
    component: str,
    query: str,
    spec: SignalDef,
    series: int,
    limit: list[Sample] | float | None,
    peers: PeerNoise | None = None,
    figures: Figures | None = None,
) -> SeriesStats:
    """A series' statistics for an incident. ``figures``: the series' figures, where a scan computed
    them for many series at once (else they are computed here, :func:`~opsagent.stats.series_figures`)."""
    window = _window(incident)
    (b0, b1), onset, end = window["baseline"], window["onset"], window["end"]
    refer = partial(reference, baseline=(b0, b1), window_start=window["window_start"], onset=onset)
    figures = figures or series_figures(samples, **window)
    ref = figures.reference
    floor = min_effect(spec)
    centre, spread = (ref.centre, max(ref.spread, floor / 2)) if ref else (None, None)
    window_max = figures.window_max
    level = figures.worse_half(spec.direction, centre)
    z = (level - centre) / spread if level is not None and centre is not None and spread else None
    ratio = effect_ratio(level, centre, floor)
    bar = {"min_ratio": SHORT_REFERENCE_RATIO, "max_ratio": 1 / SHORT_REFERENCE_RATIO} if ref and ref.short else {}
    direction = shift_direction(z, ratio, **bar)
    top = ceiling_of(spec.unit) if spec.direction == "down" else None
    if top is not None and level is not None and centre is not None and centre >= NEAR_CEILING * top:
        # Judged by its shortfall from the ceiling: 99.9% -> 99% is ten times the failures.
        gap = refer([(t, top - v) for t, v in samples])
        if gap is not None:
            z = -((top - level) - gap.centre) / gap.spread
            moved = shift_direction(-z, safe_ratio(top - level, gap.centre), **bar)
            direction = "down" if moved == "up" else "up" if moved == "down" else moved
    if level is not None and centre is not None and abs(level - centre) < floor:
        direction = "flat"
    brief: Literal["up", "down"] | None = None
    held: float | None = None
    if direction in ("up", "down") and spread is not None and centre is not None:
        gap = refer([(t, top - v) for t, v in samples]) if top is not None and centre >= NEAR_CEILING * top else None
        measured = [(t, top - v) for t, v in samples] if gap is not None and top is not None else samples
        normal, noise = (gap.centre, gap.spread) if gap is not None else (centre, spread)
        away = (1.0 if direction == "up" else -1.0) * (-1.0 if gap is not None else 1.0)
        least = max(SHIFT_Z * noise, floor)
        held = held_since(measured, onset=onset, centre=normal, away=away, least=least)
        if ranking.on("brief") and is_brief(measured, onset=onset, end=end, centre=normal, away=away, least=least):
            brief, direction = direction, "flat"
    if (spec.direction == "down" and direction == "up") or (spec.direction == "up" and direction == "down"):
        direction = "flat" if direction != "unknown" else direction
    own_history = ref is not None and not ref.short and ref.samples >= PEER_POOLING_BELOW
    asked = peers is not None and level is not None and centre is not None and not own_history
    surprise = peers.surprise(level, centre) if asked and peers and level is not None and centre is not None else None
    if direction in ("up", "down") and surprise is not None and surprise >= PEER_SURPRISE and ranking.on("peer_noise"):
        direction = "flat"  # its peers stray this far before onset all the time
    cp = figures.change_point
    return SeriesStats(
        signal=signal,
        component=component,
        query=query,
        unit=spec.unit,
        series=series,
        baseline_mean=centre,
        baseline_std=spread,
        window_mean=level,
        window_max=window_max,
        peak_ratio=safe_ratio(window_max, centre),
        mean_ratio=ratio,
        z_score=z,
        change_point=ts(cp) if cp is not None else None,
        **_against_limit(samples, limit, onset, end, peak=window_max),
        direction=direction,
        peer_surprise=surprise,
        brief=brief,
        held_since=ts(held) if held is not None else None,
    )


#: How many spreads from its centre a sample must lie to count as shifted (as the window's level must:
#: opsagent.stats.shift_direction).
SHIFT_Z = 3.0


def held_since(samples: Sequence[Sample], *, onset: float, centre: float, away: float, least: float) -> float | None:
    """When the run of shifted samples that reaches onset began: every sample since lies at least
    ``least`` from ``centre`` (``away``: +1 upwards, -1 downwards). None where the last sample before
    onset is not shifted. An alert with a ``for:`` clause fires once its condition has held that long,
    so this is when the shift it reports began."""
    start = None
    for t, v in sorted(((t, v) for t, v in samples if t < onset), reverse=True):
        if away * (v - centre) < least:
            break
        start = t
    return start


def is_brief(samples: Sequence[Sample], *, onset: float, end: float, centre: float, away: float, least: float) -> bool:
    """Whether a shift is one sample's excursion that the series had already made before onset.

    A fault holds: once it starts, every sample shows it. A series that left its level in one sample
    only after onset, no farther than it had gone before onset (a jittery tail percentile that spikes
    every few minutes), moved as it always does. One sample farther than ever before still counts, as
    does any shift that holds for two samples; with one sample after onset there is nothing to tell.
    ``away`` is +1 where the shift is upwards, -1 downwards; ``least`` how far a sample must lie from
    ``centre`` to count as shifted."""
    after = [away * (v - centre) for t, v in samples if onset <= t < end]
    if len(after) < 2 or sum(1 for d in after if d >= least) >= 2:
        return False
    before = [away * (v - centre) for t, v in samples if t < onset]
    return bool(before) and max(before) >= max(after)


#: The smallest change that matters, by unit, for a signal that does not say (``min_delta``): below
#: it, a shift is noise however many times its tiny baseline it is (0 -> 0.13 requests/s is not a
#: surge; 1 ms -> 3 ms is not a slowdown).
UNIT_MIN_EFFECT: dict[str, float] = {
    "s": 0.005,
    "seconds": 0.005,
    "ms": 5.0,
    "milliseconds": 5.0,
    "us": 5000.0,
    "percent": 1.0,
    "%": 1.0,
    "ratio": 0.01,
    "req/s": 1.0,
    "requests/s": 1.0,
    "ops": 1.0,
    "1/s": 0.1,
    "millicores": 50.0,  # a twentieth of a core
    "cores": 0.05,
    "mib": 20.0,
}


def min_effect(spec: SignalDef) -> float:
    """The smallest absolute change of a signal that counts: its own ``min_delta``, else its unit's."""
    return spec.min_delta or UNIT_MIN_EFFECT.get((spec.unit or "").lower(), 0.0)


def effect_ratio(level: float | None, centre: float | None, floor: float) -> float | None:
    """How many times its normal level a signal moved, with levels below the smallest change that
    counts read as that floor: a series rising from zero moves by level/floor, not by infinity."""
    if level is None or centre is None:
        return None
    if floor > 0 and level >= 0 and centre >= 0:
        return max(level, floor) / max(centre, floor)
    return safe_ratio(level, centre)


def _against_limit(
    samples: Sequence[Sample], limit: list[Sample] | float | None, start: float, end: float, *, peak: float | None
) -> dict[str, float | None]:
    """How close the window came to its ceiling, each sample against the ceiling in force then
    (a pool resized from 32 to 4 mid-window is full at 4); ``peak`` is the window's largest sample."""
    if limit is None:
        return {"limit": None, "limit_fraction": None}
    if isinstance(limit, float | int):
        return {"limit": float(limit), "limit_fraction": safe_ratio(peak, float(limit))}
    ceiling = sorted(limit)
    best: tuple[float, float] | None = None
    for t, v in samples:
        if not (start <= t < end):
            continue
        i = bisect_right(ceiling, (t, math.inf)) - 1
        lim = ceiling[max(i, 0)][1] if ceiling else None
        frac = safe_ratio(v, lim)
        if frac is not None and lim and (best is None or frac > best[0]):
            best = (frac, lim)
    if best is None:
        return {"limit": None, "limit_fraction": None}
    return {"limit": best[1], "limit_fraction": best[0]}
