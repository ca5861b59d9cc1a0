"""The time calls spend between the two ends of an edge, from traces.

A caller's client span lasts as long as the call as the caller sees it; the callee's server span
under it, as long as the callee worked on it. What lies between (the wire, a proxy, the queue in front
of the callee's handler) is the gap. A network delay at a component lengthens the gap of the calls
*into* it from every caller while its own server time stays flat: the one place traces show a delay
on the wire. Pure functions over :class:`~opsagent.fixtures.Span` records (or their columns); no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median

import numpy as np

from opsagent.analysis.columns import SpanColumns
from opsagent.fixtures import Span, unix
from opsagent.models import CallGap, Incident

#: Fewer calls than this on an edge on either side of onset, and its gap is not compared.
MIN_CALLS = 3
#: Scale of the median absolute deviation to a standard deviation, for normally spread values.
MAD_SCALE = 1.4826
#: Fewer paired samples than this on either side of onset, and an edge's gap measured at both ends by
#: series is not compared (as MIN_CALLS calls of a traced edge).
MIN_PAIRED = 3
#: Milliseconds in one of each time unit a latency series may be in.
MS_PER_UNIT = {"s": 1000.0, "seconds": 1000.0, "ms": 1.0, "milliseconds": 1.0, "us": 0.001}
#: A call edge's gap grew when it rose by this many of its own spreads before onset, and by at least
#: GAP_MIN_MS: a spread under which the gap wanders anyway, and the least extra time per call a caller
#: notices.
GAP_SPREADS = 3.0
GAP_MIN_MS = 20.0


def call_gaps(spans: Sequence[Span] | SpanColumns, *, incident: Incident, service: str | None = None) -> list[CallGap]:
    """Per caller -> callee edge, the median gap before and after onset.

    Before onset is the incident's baseline where the edge has calls enough there, else the calls
    between the window's start and onset (a recording whose traces start shortly before onset). The
    spans may come as columns (:class:`~opsagent.analysis.spans.SpanColumns`), read once for every
    analysis of them; the gaps are computed over the arrays, each the same float as one span at a
    time."""
    columns = spans if isinstance(spans, SpanColumns) else SpanColumns.read(spans)
    # a parent id that several spans of its trace have is its last one's
    parent_of = columns.last_of(columns.own, columns.keys)
    called = np.flatnonzero(columns.parent >= 0)
    # Only a parent with a single child is the caller's client span for that one call; a parent that
    # makes several calls (or is the caller's own server span) holds its own work and other calls too.
    children = np.bincount(columns.parent[called], minlength=columns.keys)
    parent = parent_of[columns.parent[called]]
    known = parent >= 0
    called, parent = called[known], parent[known]
    caller, callee = columns.service[parent], columns.service[called]
    measured = (caller != callee) & (children[columns.parent[called]] == 1)
    if service is not None:
        code = columns.services.index(service) if service in columns.services else -1
        measured &= (caller == code) | (callee == code)
    called, parent, caller, callee = called[measured], parent[measured], caller[measured], callee[measured]
    n_services = max(len(columns.services), 1)
    edge = caller * n_services + callee
    wait = columns.duration_us[parent] - columns.duration_us[called]
    gap = np.where(wait > 0, wait, 0.0) / 1000.0
    b0, b1 = unix(incident.baseline.start), unix(incident.baseline.end)
    w0, onset, w1 = unix(incident.window.start), unix(incident.onset), unix(incident.window.end)
    t = columns.start[called]
    in_window = (onset <= t) & (t < w1)
    in_baseline = ~in_window & (b0 <= t) & (t < b1)
    in_pre = ~in_window & ~in_baseline & (w0 <= t) & (t < onset)

    def by_edge(where: np.ndarray) -> dict[tuple[str, str], list[float]]:
        """The gaps of the selected calls, per edge, each list in span order."""
        picked = np.flatnonzero(where)
        if not picked.size:
            return {}
        ordered = picked[np.argsort(edge[picked], kind="stable")]
        codes, first = np.unique(edge[ordered], return_index=True)
        names = columns.services
        return {
            (names[code // n_services], names[code % n_services]): values.tolist()
            for code, values in zip(codes.tolist(), np.split(gap[ordered], first[1:]), strict=True)
        }

    window, baseline, pre = by_edge(in_window), by_edge(in_baseline), by_edge(in_pre)
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


def gap_grew(gap: CallGap, own_out: float = 0.0) -> bool:
    """Whether an edge's calls lose more time between its ends than before onset, beyond their own noise
    and beyond what the callee's own outbound calls lost (``own_out``, ms)."""
    return gap.shift_ms - own_out >= max(GAP_MIN_MS, GAP_SPREADS * gap.spread_ms_baseline)
