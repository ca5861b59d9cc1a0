"""The time calls spend between the two ends of an edge, from traces.

A caller's client span lasts as long as the call as the caller sees it; the callee's server span
under it, as long as the callee worked on it. What lies between (the wire, a proxy, the queue in front
of the callee's handler) is the gap. A network delay at a component lengthens the gap of the calls
*into* it from every caller while its own server time stays flat: the one place traces show a delay
on the wire. Pure functions over :class:`~opsagent.fixtures.Span` records; no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from statistics import median

from opsagent.fixtures import Span, unix
from opsagent.models import CallGap, Incident

#: Fewer calls than this on an edge on either side of onset, and its gap is not compared.
MIN_CALLS = 3
#: Scale of the median absolute deviation to a standard deviation, for normally spread values.
MAD_SCALE = 1.4826


def call_gaps(spans: Sequence[Span], *, incident: Incident, service: str | None = None) -> list[CallGap]:
    """Per caller -> callee edge, the median gap before and after onset.

    Before onset is the incident's baseline where the edge has calls enough there, else the calls
    between the window's start and onset (a recording whose traces start shortly before onset)."""
    by_id = {(s.trace_id, s.span_id): s for s in spans}
    # Only a parent with a single child is the caller's client span for that one call; a parent that
    # makes several calls (or is the caller's own server span) holds its own work and other calls too.
    children: dict[tuple[str, str], int] = defaultdict(int)
    for s in spans:
        if s.parent_id:
            children[(s.trace_id, s.parent_id)] += 1
    b0, b1 = unix(incident.baseline.start), unix(incident.baseline.end)
    w0, onset, w1 = unix(incident.window.start), unix(incident.onset), unix(incident.window.end)
    baseline: dict[tuple[str, str], list[float]] = defaultdict(list)
    pre: dict[tuple[str, str], list[float]] = defaultdict(list)
    window: dict[tuple[str, str], list[float]] = defaultdict(list)
    for s in spans:
        parent = by_id.get((s.trace_id, s.parent_id)) if s.parent_id else None
        if parent is None or parent.service == s.service or children[(s.trace_id, parent.span_id)] != 1:
            continue
        if service is not None and service not in (parent.service, s.service):
            continue
        edge = (parent.service, s.service)
        gap = max(parent.duration_us - s.duration_us, 0) / 1000.0
        t = s.start_s
        if onset <= t < w1:
            window[edge].append(gap)
        elif b0 <= t < b1:
            baseline[edge].append(gap)
        elif w0 <= t < onset:
            pre[edge].append(gap)
    out = []
    for edge in sorted(window):
        before = baseline.get(edge, [])
        if len(before) < MIN_CALLS:
            before = pre.get(edge, [])
        after = window[edge]
        if len(before) < MIN_CALLS or len(after) < MIN_CALLS:
            continue
        centre = median(before)
        out.append(
            CallGap(
                caller=edge[0],
                callee=edge[1],
                calls_baseline=len(before),
                calls_window=len(after),
                gap_ms_baseline=round(centre, 3),
                gap_ms_window=round(median(after), 3),
                spread_ms_baseline=round(MAD_SCALE * median(abs(g - centre) for g in before), 3),
            )
        )
    return out


def calls_into(gaps: Sequence[CallGap], component: str) -> tuple[list[CallGap], float]:
    """The measured calls into a component, and how much its own outbound calls slowed (ms, at least 0):
    what the fault-mechanism detector and the playbooks' check both read."""
    inbound = [g for g in gaps if g.callee == component]
    outbound = max((g.shift_ms for g in gaps if g.caller == component), default=0.0)
    return inbound, max(outbound, 0.0)
