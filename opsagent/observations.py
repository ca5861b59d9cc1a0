"""How an observation reads: compact text for a reasoner's context and a human's eyes.

The text is what token budgets count (4 characters a token, the usual estimate). Renderers are
plain functions, one per observation type, and never truncate a line mid-way: they choose what to
show, highest information first.
"""

from __future__ import annotations

from opsagent.models import (
    ChangesData,
    ErrorData,
    KubernetesData,
    LogsData,
    MetricsData,
    ObservationData,
    SeriesStats,
    TracesData,
    VersionsData,
)


def estimate_tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def fmt(value: float | None, unit: str | None = None) -> str:
    if value is None:
        return "n/a"
    if unit == "s" and abs(value) < 10:
        return f"{value * 1000:.0f} ms"
    if unit == "bytes":
        return f"{value / 2**20:.0f} MiB"
    if abs(value) >= 100 or value == int(value):
        return f"{value:.0f}" + (f" {unit}" if unit and unit not in ("ratio", "count") else "")
    return f"{value:.3g}" + (f" {unit}" if unit and unit not in ("ratio", "count") else "")


def describe_series(s: SeriesStats) -> str:
    parts = [
        f"{s.signal} of {s.component}: baseline {fmt(s.baseline_mean, s.unit)}",
        f"window {fmt(s.window_mean, s.unit)} (peak {fmt(s.window_max, s.unit)})",
    ]
    if s.mean_ratio is not None:
        parts.append(f"x{s.mean_ratio:.2f}")
    if s.z_score is not None:
        parts.append(f"z={s.z_score:.1f}")
    parts.append(s.direction)
    if s.limit is not None:
        parts.append(f"at {fmt(s.window_max)}/{fmt(s.limit)} of limit")
    if s.change_point is not None and s.direction in ("up", "down"):
        parts.append(f"shift at {s.change_point:%H:%M}")
    return ", ".join(parts)


#: Beyond this many series (a scan of everything), the text lists the series that moved, the
#: loudest first, up to this many, and counts the rest: what moved is what an engineer reads.
SERIES_LISTED = 40


def _metrics(d: MetricsData) -> str:
    if not d.stats:
        return "no series matched"
    if len(d.stats) <= SERIES_LISTED:
        return "\n".join(describe_series(s) for s in d.stats)
    moved = [s for s in d.stats if s.direction in ("up", "down")]
    moved.sort(key=lambda s: (-abs(s.z_score or 0.0), s.component, s.signal))
    flat = sum(1 for s in d.stats if s.direction == "flat")
    lines = [
        f"{len(d.stats)} series: {len(moved)} moved, {flat} flat, {len(d.stats) - len(moved) - flat} not judged "
        "(too little data before onset)"
    ]
    lines += [describe_series(s) for s in moved[:SERIES_LISTED]]
    if len(moved) > SERIES_LISTED:
        lines.append(f"... and {len(moved) - SERIES_LISTED} more that moved, each less")
    return "\n".join(lines)


def _logs(d: LogsData) -> str:
    # imported here: the renderer measures its budget with estimate_tokens, defined above
    from opsagent.logsummary.render import render

    return render(d)


def _changes(d: ChangesData) -> str:
    if not d.changes:
        return "no changes in range"
    return "\n".join(
        f"[{c.id}] {c.ts:%H:%M} ({c.minutes_before_onset:+.0f} min before onset) {c.kind} {c.service}: "
        f"{c.summary}"
        + (f" ({c.from_version} -> {c.to_version})" if c.to_version else "")
        + (f"\n    diff: {c.diff.strip()}" if c.diff else "")
        for c in d.changes
    )


def _traces(d: TracesData) -> str:
    lines = []
    for s in d.services:
        shift = f"x{s.self_shift:.2f}" if s.self_shift is not None else "n/a"
        lines.append(
            f"{s.service}: self p50 {fmt(s.self_ms_baseline)} -> {fmt(s.self_ms_window)} ms ({shift}), "
            f"total p50 {fmt(s.total_ms_baseline)} -> {fmt(s.total_ms_window)} ms, "
            f"errors {s.errors_baseline} -> {s.errors_window} (born here {s.origin_errors_baseline} -> "
            f"{s.origin_errors_window})" + (f", calls/span x{s.fanout_shift:.2f}" if s.fanout_shift else "")
        )
    for o in d.slowest_operations:
        lines.append(f"slow: {o.service} {o.operation} p95 {o.p95_ms:.0f} ms (self {o.self_p95_ms:.0f} ms)")
    if d.blocked_parents:
        lines.append("waiting on callees: " + ", ".join(d.blocked_parents))
    return "\n".join(lines) or "no spans in range"


def _kubernetes(d: KubernetesData) -> str:
    lines = []
    for w in d.workloads:
        extra = "".join(
            f", {what} {', '.join(f'{k} x{n}' for k, n in counts.items())}"
            for what, counts in (("ended", w.terminations), ("waiting", w.waiting))
            if counts
        )
        pending = f", {w.pending} pending" if w.pending else ""
        lines.append(f"{w.service}: {w.ready}/{w.pods} pods ready, {w.restarts} restarts{pending}{extra}")
    for p in d.pods:
        where = f" on {p.node}" if p.node else ""
        head = f"pod {p.name} ({p.phase}{', ready' if p.ready else ', not ready'}{where}"
        lines.append(
            head
            + (f", version {p.version})" if p.version else ")")
            + (f": {p.unschedulable}" if p.unschedulable else "")
        )
        for c in p.containers:
            now = (
                c.state
                + (f" {c.reason}" if c.reason else "")
                + (f" exit {c.exit_code}" if c.exit_code is not None else "")
            )
            last = f"; last ended {c.last_reason} (exit {c.last_exit_code})" if c.last_reason else ""
            at = f" at {c.last_finished_at:%H:%M:%S}" if c.last_finished_at and c.last_reason else ""
            limit = f"; memory limit {c.memory_limit}" if c.memory_limit else ""
            lines.append(f"  {c.name}: {now}, {c.restarts} restarts{last}{at}{limit}")
    if d.omitted_pods:
        lines.append(f"({d.omitted_pods} more pods, healthy ones, not listed)")
    for e in d.events:
        seen = f" last {e.last_seen:%H:%M}" if e.last_seen else ""
        lines.append(f"event {e.type} {e.reason} {e.object} x{e.count}{seen}: {e.message}")
    for n in d.nodes:
        state = "ready" if n.ready else "NOT ready"
        lines.append(
            f"node {n.name}: {state}"
            + (f", {', '.join(n.problems)}" if n.problems else "")
            + (", cordoned" if n.unschedulable else "")
        )
    lines.extend(f"could not read {u}" for u in d.unread)
    return "\n".join(lines) or "no pods, events or nodes found"


def _versions(d: VersionsData) -> str:
    if d.new_version is None:
        return f"{d.service}: no versions to compare ({d.reason})"
    since = f" since {d.since:%H:%M}" if d.since else ""
    lines = [
        f"{d.service} {d.new_version} ({len(d.new_pods)} pod(s)) against {d.old_version} ({len(d.old_pods)}){since}: "
        f"{d.verdict.replace('_', ' ')}: {d.reason}"
    ]
    for c in sorted(d.comparisons, key=lambda c: (not c.worse, c.p_value if c.p_value is not None else 1.0))[:6]:
        edge = f" {c.caller}->{c.callee}" if c.callee else ""
        p = f"p={c.p_value:.2g}" if c.p_value is not None else ""
        mark = " worse" if c.worse else ""
        lines.append(
            f"  {c.metric}{edge}: new {fmt(c.new_median, c.unit)} vs old {fmt(c.old_median, c.unit)} {p}{mark}"
        )
    return "\n".join(lines)


def describe(data: ObservationData) -> str:
    if isinstance(data, MetricsData):
        return _metrics(data)
    if isinstance(data, LogsData):
        return _logs(data)
    if isinstance(data, ChangesData):
        return _changes(data)
    if isinstance(data, TracesData):
        return _traces(data)
    if isinstance(data, KubernetesData):
        return _kubernetes(data)
    if isinstance(data, VersionsData):
        return _versions(data)
    assert isinstance(data, ErrorData)
    return f"error: {data.error}" + (f" (hint: {data.hint})" if data.hint else "")
