"""Evidence by fault mechanism, calibrated on the incident itself.

Each kind of fault leaves its own trace, and a detector here looks for that trace in every
component of the incident:

* ``capacity`` — saturation is capacity *used*: the share of a known limit (a CPU or memory limit, a
  pool size) newly consumed after onset, ``(window max - level before) / limit``. A neighbour that
  slows down beside a CPU hog does not consume its own capacity; the hog does.
* ``own_errors`` — a code fault says so in the component's own logs: new error templates that name no
  dependency's or resource's failure.
* ``calls_in`` — a network fault slows the calls *into* a component as its callers see them (the gap
  between the caller's client span and the component's server span grows) while the component's own
  outbound calls do not slow alike.
* ``vanished`` — a code fault removes expected behaviour: a step of the component's requests (a log
  line, a call) that used to follow another now rarely does (:mod:`opsagent.analysis.steps`), though
  the step before it still happens. Its callers log the failure; the component stops doing its work.
  Where few requests came after onset, a step the code always took next (its fixed path) that most of
  them now miss has vanished too, however unsure the exact test on so few.

A detector's value for a component means little on its own: log and latency figures of innocent
components routinely move a lot against a short baseline. So each value is judged against the same
detector's values over the *other components of the same incident*: its surprise is how many spreads
(a robust standard deviation of the others, never less than the detector's floor) it lies beyond
their median. One scale then serves every detector and every environment, and the ranking combines
surprises, not raw figures. A mechanism that clearly proves itself names the fault's kind.

The features this module adds (``mech:<detector>`` and ``mech:<detector>:<signal>``) weigh by their
surprise (:func:`mechanism_weight`); :mod:`opsagent.ranking` adds them to a component's own score and
the playbooks name the kind each mechanism stands for.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import median

from opsagent.analysis.gaps import GAP_MIN_MS, MIN_CALLS, MIN_PAIRED, calls_into
from opsagent.analysis.steps import BROKEN_SHARE, FIXED_PATH, MIN_STEPS, broken_share
from opsagent.fixtures import Edge
from opsagent.graph import callees_of
from opsagent.models import CallGap, LogsData, MetricsData, Observation, TracesData

MIN_CALLS_TEXT = f"at least {MIN_CALLS}"

#: Scale of the median absolute deviation to a standard deviation, for normally spread values.
MAD_SCALE = 1.4826
#: With fewer other components than this, the others say little about what is normal: the value is
#: judged against the detector's floor alone.
MIN_PEERS = 3
#: A surprise this large (spreads beyond the other components of the incident) proves the mechanism:
#: below it, innocent components of real incidents reach as much.
CLEAR = 6.0
#: A clear mechanism weighs MECH_WEIGHT, one more for every doubling of its surprise beyond CLEAR, up
#: to MECH_CAP: about as much as the loudest metric shift (opsagent.ranking.METRIC_LOG2_CAP + floor),
#: and more where a mechanism stands out by orders of magnitude.
MECH_WEIGHT, MECH_CAP = 3.0, 6.0


@dataclass(frozen=True)
class Detector:
    name: str
    unit: str
    #: The smallest spread worth dividing by, in the detector's unit: differences below it are noise
    #: whatever the other components show.
    floor: float
    #: The least value that can mean the mechanism at all, in the detector's unit.
    minimum: float
    #: The surprise that proves this mechanism; findings are rescaled so that it maps onto CLEAR and
    #: every detector then speaks on one scale.
    clear: float = CLEAR


#: New consumption of a known limit: a spread of less than 2 % of a limit is noise, and a component
#: must newly use at least a fifth of its limit to be saturating.
CAPACITY = Detector("capacity", "share of the limit", floor=0.02, minimum=0.2)
#: The gap of calls into a component: a spread of less than 5 ms no caller notices, and at least 20 ms
#: more per call must be lost on the way in.
CALLS_IN = Detector("calls_in", "ms", floor=5.0, minimum=GAP_MIN_MS)

#: Lines per minute of new error templates of the component's own making (none naming a dependency's
#: failure): a spread under a line every two minutes is noise, and at least that many must be new.
OWN_ERRORS = Detector("own_errors", "lines/min", floor=0.5, minimum=0.5)

#: The sharpest fall of a step's usual successor, as a z (Fisher's exact test). Each value is
#: already the largest of many such comparisons within a component, and the innocent components of
#: an incident whose traffic mix changed reach several: a spread under 1 is noise, at least 3 must be
#: lost for the step to have vanished, and standing 4 spreads beyond the others proves it (measured on
#: recorded incidents: at 4, the component that threw was the only one so clear in 9 of 10 such cases,
#: against 6 at CLEAR, where innocent components also crossed).
VANISHED = Detector("vanished", "z", floor=1.0, minimum=3.0, clear=4.0)

#: The same mechanism read categorically, where too few requests came for the exact test to be sure (a
#: fixed path broken in most requests, opsagent.analysis.steps.broken_share): the value is the share of
#: requests that lost the step; a spread under a tenth of the requests is noise, and at least
#: FIXED_PATH - BROKEN_SHARE of them must have lost it.
BROKEN_PATH = Detector("vanished", "share of requests", floor=0.1, minimum=FIXED_PATH - BROKEN_SHARE)

#: A peak within this many spreads of the series' centre before onset is within its usual range: its
#: rise is nothing the component did not do before (the same bar a shifted sample must clear,
#: opsagent.analysis.series.SHIFT_Z; not imported from there, which would import this module back).
USUAL_RANGE_Z = 3.0

#: Signals whose sudden use of a limit is a saturation of a kind of capacity (the catalog's semantic
#: names). Memory is not among them: a leak grows over time rather than stepping up at onset, and pods
#: replaced by a rollout start their memory anew, so a step in it says little (measured: it named
#: innocent rolled-out services on real incidents).
CAPACITY_SIGNALS: dict[str, str] = {
    "cpu_usage": "cpu_saturation",
    "db_connections_used": "db_pool_exhaustion",
    "threadpool_active": "thread_pool_exhaustion",
}


#: Capacities whose exhaustion at a caller lengthens its client spans without the callee's or the
#: wire's doing: a CPU-starved caller reads its answers late, one out of connections or worker threads
#: waits for one inside the call (where its instrumentation opens the client span first).
CALLER_SIDE = tuple(CAPACITY_SIGNALS)


@dataclass(frozen=True)
class Finding:
    """One mechanism's evidence about one component: its value, and how surprising it is here."""

    component: str
    detector: str
    feature: str
    value: float
    surprise: float
    observation: str
    why: str


def surprise(values: Mapping[str, float], floor: float) -> dict[str, float]:
    """How far each component's value lies beyond the other components' values, in their spreads.

    Robust (median and scaled MAD of the others), and never divided by less than ``floor``: with few
    others, or others all alike, the floor says what a meaningful difference is."""
    if len(values) <= MIN_PEERS or not all(type(v) is float and math.isfinite(v) for v in values.values()):
        return {c: _beyond_others(v, [o for k, o in values.items() if k != c], floor) for c, v in values.items()}
    # Each component's others are all the values but its own: the values are sorted once, and each
    # component's median and MAD are read from the sorted values with its own left out (a median of
    # every other value is one of at most three, so the deviations are sorted at most three times).
    # A sort per component instead made a large system's calibration grow with the square of its
    # components. The medians are of the same numbers in the same order as a sort of the others gives
    # (the sort is stable, ties keep the mapping's order), so every surprise is the same to the bit.
    names = list(values)
    order = sorted(range(len(names)), key=lambda i: values[names[i]])
    ranked = [values[names[i]] for i in order]
    deviations: dict[tuple[int, ...], list[float]] = {}
    out: dict[str, float] = {}
    for position, i in enumerate(order):
        middle = _middle(len(ranked) - 1, left_out=position)
        centre = _median_at(ranked, middle)
        devs = deviations.get(middle)
        if devs is None:
            devs = deviations[middle] = sorted(abs(v - centre) for v in ranked)
        value = ranked[position]
        mad = _median_at(devs, _middle(len(devs) - 1, left_out=bisect_left(devs, abs(value - centre))))
        out[names[i]] = (value - centre) / max(MAD_SCALE * mad, floor)
    return {c: out[c] for c in values}


def _beyond_others(value: float, others: list[float], floor: float) -> float:
    """One component's surprise from its others, as :func:`surprise` defines it."""
    if len(others) < MIN_PEERS:
        centre, spread = 0.0, floor
    else:
        centre = median(others)
        spread = max(MAD_SCALE * median(abs(v - centre) for v in others), floor)
    return (value - centre) / spread


def _middle(n: int, *, left_out: int) -> tuple[int, ...]:
    """Where the median of ``n`` sorted values lies in a sorted list of ``n + 1`` with the one at
    ``left_out`` left out: one position for an odd ``n``, the two to average for an even one."""
    wanted = (n // 2,) if n % 2 else (n // 2 - 1, n // 2)
    return tuple(j if j < left_out else j + 1 for j in wanted)


def _median_at(ordered: Sequence[float], middle: tuple[int, ...]) -> float:
    """``statistics.median``'s arithmetic on the values at ``middle``."""
    return ordered[middle[0]] if len(middle) == 1 else (ordered[middle[0]] + ordered[middle[1]]) / 2


def mechanism_weight(s: float) -> float:
    """What a mechanism with surprise ``s`` weighs: nothing below CLEAR, then growing with log2."""
    if s < CLEAR:
        return 0.0
    return min(MECH_WEIGHT + math.log2(s / CLEAR), MECH_CAP)


def _usable_limit(limit: float | None) -> bool:
    """A limit a share can be taken of: known, above zero, finite."""
    return limit is not None and limit > 0 and math.isfinite(limit)


def capacity_findings(observations: Iterable[Observation]) -> list[Finding]:
    """Newly used capacity of every component with a known limit, per signal."""
    used: dict[str, dict[str, tuple[float, str, str]]] = {}
    for obs in observations:
        if not obs.ok or not isinstance(obs.data, MetricsData):
            continue
        for s in obs.data.stats:
            if s.signal not in CAPACITY_SIGNALS or s.scope != "service":
                continue
            if s.limit is None or not _usable_limit(s.limit) or s.window_max is None or s.baseline_mean is None:
                continue
            share = (s.window_max - s.baseline_mean) / s.limit
            if not math.isfinite(share) or share > 1.5:  # more than the limit allows: a wrong limit
                continue
            usual = s.baseline_mean + USUAL_RANGE_Z * (s.baseline_std or 0.0)
            if share > 0 and s.window_max <= usual:
                # It went as high before onset (its centre +- USUAL_RANGE_Z spreads): nothing new used.
                share = 0.0
                why = (
                    f"{s.signal} peaks at {s.window_max:.3g} of {s.limit:.3g}, within its usual range before onset "
                    f"(up to {usual:.3g}): no capacity newly used"
                )
            else:
                why = (
                    f"{s.signal} newly uses {share:.0%} of its limit ({s.baseline_mean:.3g} -> {s.window_max:.3g} "
                    f"of {s.limit:.3g})"
                )
            per = used.setdefault(s.signal, {})
            if s.component not in per or share > per[s.component][0]:
                per[s.component] = (share, obs.id, why)
    return [f for signal, per in sorted(used.items()) for f in judged(CAPACITY, f"mech:capacity:{signal}", per)]


def judged(detector: Detector, feature: str, values: Mapping[str, tuple[float, str, str]]) -> list[Finding]:
    """One detector's findings: each component's value (``values``: component -> (value, observation id,
    why)) with its surprise against the others, none below the detector's minimum."""
    calibrated = surprise({c: v for c, (v, _, _) in values.items()}, detector.floor)
    scale = CLEAR / detector.clear
    return [
        Finding(
            component=c,
            detector=detector.name,
            feature=feature,
            value=v,
            surprise=calibrated[c] * scale if v >= detector.minimum else 0.0,
            observation=obs_id,
            why=why,
        )
        for c, (v, obs_id, why) in sorted(values.items())
    ]


def _fullest(observations: Iterable[Observation], size: Callable[[TracesData], int]) -> tuple[TracesData | None, str]:
    """The traces read that measured the most (by ``size``: the first of equals), and its observation id;
    none where no read measured anything."""
    best: TracesData | None = None
    obs_id = ""
    for obs in observations:
        data = obs.data
        if obs.ok and isinstance(data, TracesData) and size(data) > (size(best) if best else 0):
            best, obs_id = data, obs.id
    return best, obs_id


def calls_in_findings(observations: Iterable[Observation], *, saturated: frozenset[str] = frozenset()) -> list[Finding]:
    """How much longer calls into each component take between the ends, beyond its own outbound calls.

    Calls from a ``saturated`` caller (out of a CALLER_SIDE capacity) do not count: a starved caller
    reads its answers late, or waits for a connection inside the call, without the wire's help."""
    observations = list(observations)
    best, traced = _fullest(observations, lambda d: len(d.call_gaps))
    measured = {(g.caller, g.callee): (g, traced) for g in best.call_gaps} if best is not None else {}
    for edge, found in _metric_gaps(observations).items():
        measured.setdefault(edge, found)  # an edge traced call by call is read from its calls
    if not measured:
        return []
    kept = [g for _, (g, _) in sorted(measured.items()) if g.caller not in saturated]
    values: dict[str, tuple[float, str, str]] = {}
    for component in sorted({g.callee for g in kept}):
        inbound, own_out = calls_into(kept, component)
        top = max(inbound, key=lambda g: (g.shift_ms, g.caller))
        slowed = sum(1 for g in inbound if g.shift_ms >= CALLS_IN.minimum)
        why = (
            f"calls into {component} spend {top.shift_ms:+.0f} ms more between the ends (from {top.caller}; "
            f"{slowed} of {len(inbound)} callers slowed), its own outbound calls {own_out:+.0f} ms"
        )
        values[component] = (top.shift_ms - own_out, measured[(top.caller, component)][1], why)
    return judged(CALLS_IN, "mech:calls_in", values)


def _metric_gaps(observations: Iterable[Observation]) -> dict[tuple[str, str], tuple[CallGap, str]]:
    """The gaps of call edges whose latency is measured at both ends (the first read of each), with the
    observation that holds it."""
    out: dict[tuple[str, str], tuple[CallGap, str]] = {}
    for obs in observations:
        if obs.ok and isinstance(obs.data, MetricsData):
            for s in obs.data.stats:
                if s.gap is not None and (s.gap.caller, s.gap.callee) not in out:
                    out[(s.gap.caller, s.gap.callee)] = (s.gap, obs.id)
    return out


#: Without spans, a component's latency rise is its callees' doing where one of them rose by at least
#: this share of it: a request that waits on a slowed callee a few times over (up to 1 / INHERITED calls
#: in a row) takes that many times the callee's rise, and more than that rarely happens in one request.
INHERITED = 0.25


def latency_in_findings(
    observations: Iterable[Observation], graph: Sequence[Edge], *, measured: frozenset[str] = frozenset()
) -> list[Finding]:
    """Without traces, calls into a component slowed as its own latency series shows them, less what its
    callees explain: a delay on the wire into a component raises the latency it serves at, and its
    callers', but none of its callees' (their own server side is untouched). The component whose rise
    no callee accounts for is where the time is lost.

    Runs only where no traces were read, and not for a component whose calls in are ``measured`` at both
    ends of an edge: spans and paired edge series measure the gap between the ends directly
    (:func:`calls_in_findings`), and a latency series cannot tell the wire from the component's own work
    (the capacity detector and :func:`explained_within` take a saturated component's rise away)."""
    observations = list(observations)
    if any(o.ok and isinstance(o.data, TracesData) and (o.data.services or o.data.call_gaps) for o in observations):
        return []
    rise: dict[str, tuple[float, str, str]] = {}
    for obs in observations:
        if not obs.ok or not isinstance(obs.data, MetricsData):
            continue
        for s in obs.data.stats:
            if s.signal != "latency_p99" or s.scope != "service" or s.unit != "ms":
                continue
            if s.baseline_mean is None or s.window_mean is None:
                continue
            value = s.window_mean - s.baseline_mean
            if math.isfinite(value) and (s.component not in rise or value > rise[s.component][0]):
                rise[s.component] = (value, obs.id, f"{s.signal} {s.baseline_mean:.0f} -> {s.window_mean:.0f} ms")
    callees = callees_of(graph)
    values: dict[str, tuple[float, str, str]] = {}
    for component, (value, obs_id, why) in sorted(rise.items()):
        if component in measured:
            continue
        below = [(rise[c][0], c) for c in sorted(callees.get(component, ())) if c in rise]
        top = max(below, default=(0.0, ""))
        if value > 0 and top[0] >= INHERITED * value:
            values[component] = (0.0, obs_id, f"{why}, as its callee {top[1]} ({top[0]:+.0f} ms) explains")
        else:
            values[component] = (value, obs_id, f"{why} (mean), no callee rising alike")
    return judged(CALLS_IN, "mech:calls_in", values)


def own_error_findings(lines: Mapping[str, tuple[float, str]]) -> list[Finding]:
    """New errors of each component's own making, per minute (``lines``: component -> (lines/min, the
    observation)): a code path that now throws or returns a wrong result says so in its own logs."""
    values = {
        c: (v, obs_id, f"{v:.1f} lines/min of new error templates of {c}'s own making")
        for c, (v, obs_id) in lines.items()
    }
    return judged(OWN_ERRORS, "mech:own_errors", values)


def vanished_findings(observations: Iterable[Observation], *, paths: bool = True) -> list[Finding]:
    """Each component's sharpest missing step (from the traces read with the most components measured),
    read by how surely its share fell and (``paths``) by whether it was the code's fixed path, now broken
    in most requests."""
    best, obs_id = _fullest(observations, lambda d: len(d.step_shortfalls))
    if best is None:
        return []
    values: dict[str, tuple[float, str, str]] = {}
    broken: dict[str, tuple[float, str, str]] = {}
    for s in best.step_shortfalls:
        where = "in the baseline" if s.reference == "baseline" else "before onset"
        why = (
            f"after '{s.step}', '{s.next_step}' followed {s.share_after:.0%} of {s.steps_after} times, against "
            f"{s.share_before:.0%} of {s.steps_before} {where}"
        )
        if s.branched > 0:
            why += f"; {s.branched:.0%} of its place went to a path the step already took (z discounted alike)"
        # A component may list its sharpest fall and, where it is another step, its most broken fixed path.
        if s.component not in values or s.z > values[s.component][0]:
            values[s.component] = (s.z, obs_id, why)
        share = broken_share(s)
        if s.component not in broken or share > broken[s.component][0]:
            broken[s.component] = (
                share,
                obs_id,
                f"{why}: the code's fixed path, broken in most requests" if share else why,
            )
    if not paths:
        return judged(VANISHED, "mech:vanished", values)
    # One mechanism, two readings: each component keeps the one that stands out more.
    by_z = {f.component: f for f in judged(VANISHED, "mech:vanished", values)}
    by_path = {f.component: f for f in judged(BROKEN_PATH, "mech:vanished", broken)}
    return [max(by_z[c], by_path[c], key=lambda f: f.surprise) for c in sorted(by_z)]


def findings(observations: list[Observation], graph: Sequence[Edge] = (), *, paths: bool = True) -> list[Finding]:
    """Every detector over the incident's observations (``graph``: the call graph, for the callees'
    share of a latency rise where there are no traces; ``paths``: read broken fixed paths as vanished
    steps too)."""
    capacity = capacity_findings(observations)
    # A caller out of CPU or of connections: the wire is not to blame for its slower calls.
    saturated = frozenset(
        f.component for f in capacity if f.surprise >= CLEAR and f.feature.rsplit(":", 1)[-1] in CALLER_SIDE
    )
    calls_in = calls_in_findings(observations, saturated=saturated)
    measured = frozenset(f.component for f in calls_in)
    return [
        *capacity,
        *calls_in,
        *latency_in_findings(observations, graph, measured=measured),
        *vanished_findings(observations, paths=paths),
    ]


#: Mechanisms that place a fault in the component whatever its callees do: the wire into it, errors of
#: its own making, its CPU. (A pool of threads or connections fills up waiting on slow callees too.)
OWN_PLACE = ("mech:calls_in", "mech:own_errors", "mech:vanished", "mech:capacity:cpu_usage")


def placed_in(features: Mapping[str, float]) -> bool:
    """Whether a mechanism places the fault in this component rather than in what it waits on."""
    return any(f in features for f in OWN_PLACE)


def explained_within(found: Mapping[str, float]) -> dict[str, float]:
    """A component's mechanisms, less those another of its own mechanisms explains: a component
    saturating its CPU answers late, so slower calls into it are its saturation's doing, not the wire's;
    a starved or cut-off component's requests time out, so the steps they miss are not a code fault."""
    out = dict(found)
    if any(k.startswith("mech:capacity:") for k in out):
        out.pop("mech:calls_in", None)
    if any(k.startswith("mech:capacity:") or k == "mech:calls_in" for k in out):
        out.pop("mech:vanished", None)
    return out


def coverage(observations: list[Observation], found: Iterable[Finding]) -> dict[str, str]:
    """Per detector, what it ran over, or why it could not run (a report says so rather than scoring
    silently zero)."""
    found = list(found)
    ran: dict[str, set[str]] = {}
    for f in found:
        ran.setdefault(f.detector, set()).add(f.component)
    saturation = [
        s
        for o in observations
        if o.ok and isinstance(o.data, MetricsData)
        for s in o.data.stats
        if s.signal in CAPACITY_SIGNALS and s.scope == "service"
    ]
    limited = bool(saturation)
    with_limit = [s for s in saturation if _usable_limit(s.limit)]
    unmeasured_before = bool(with_limit) and all(s.baseline_mean is None for s in with_limit)
    traced = any(o.ok and isinstance(o.data, TracesData) and o.data.services for o in observations)
    logged = any(o.ok and isinstance(o.data, LogsData) and o.data.service is not None for o in observations)
    out: dict[str, str] = {}
    if CAPACITY.name in ran:
        out[CAPACITY.name] = f"ran over {len(ran[CAPACITY.name])} components with a known limit"
    elif unmeasured_before:
        out[CAPACITY.name] = (
            "could not run: the saturation signals with a limit have no level before onset (series that began "
            "after it, such as a pod started since): nothing to compare the use after onset with"
        )
    elif limited:
        out[CAPACITY.name] = (
            "could not run: the saturation signals have no usable limit (none, 0, not finite, or exceeded by "
            "more than half): give the catalog's signal a limit"
        )
    else:
        out[CAPACITY.name] = "could not run: no saturation signal (" + ", ".join(CAPACITY_SIGNALS) + ") was read"
    both_ends = (
        "no edge's latency was measured by one series at each end (caller and callee) with "
        f"{MIN_PAIRED} paired samples before and after onset"
    )
    if CALLS_IN.name in ran:
        out[CALLS_IN.name] = f"ran over calls into {len(ran[CALLS_IN.name])} components"
    elif traced:
        out[CALLS_IN.name] = (
            f"could not run: no call edge had a client span over one server span, with {MIN_CALLS_TEXT} calls "
            f"before and after onset; {both_ends}"
        )
    else:
        out[CALLS_IN.name] = f"could not run: no traces were read, and {both_ends}"
    if VANISHED.name in ran:
        out[VANISHED.name] = f"ran over the steps of {len(ran[VANISHED.name])} components"
    elif traced:
        out[VANISHED.name] = f"could not run: no component took a step {MIN_STEPS} times both before and after onset"
    else:
        out[VANISHED.name] = "could not run: no traces were read"
    if OWN_ERRORS.name in ran:
        out[OWN_ERRORS.name] = f"ran over the logs of {len(ran[OWN_ERRORS.name])} components"
    elif logged:
        out[OWN_ERRORS.name] = "could not run: no component's logs were summarised"
    else:
        out[OWN_ERRORS.name] = "could not run: no logs were read"
    return out
