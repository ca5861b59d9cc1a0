"""Canary analysis: the new version's pods of a service against its old version's, same minutes.

A rollout in progress runs two versions side by side, serving the same traffic. Each metric of the
new version's pods is compared with the old version's over the minutes both ran, with a
nonparametric test fit for a handful of one-minute samples (Mann-Whitney U, as Kayenta does; from
SciPy). A new version that fails more, or is slower by a margin that counts, is strong evidence
against its change; one that behaves like the old is evidence for its innocence; one its rollout
says is running but that reports nothing while the old version does cannot be cleared (its pods
are not ready, crash, or are not scraped), which says the rollout is not well either.

Which version a series belongs to comes from its version label, else from the rollout's record of
the pods of each version; which version is new comes from the rollout (its to-version), else from
which version appeared last. Only series the service's own pods emit count: a caller's view of its
calls carries the caller's version, not the callee's. Resource figures (CPU, memory) of freshly
started pods differ from warm ones as a rule, so they are reported but never decide. No I/O here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import Literal

from opsagent.analysis.changes import moves
from opsagent.analysis.series import SERVICE_LABELS, min_effect, rollup, side_of
from opsagent.fixtures import MetricSeries, SignalDef, unix
from opsagent.models import ChangeRecord, Incident, VersionComparison, VersionsData
from opsagent.naming import bad_way, meaning_of, unit_of
from opsagent.stats import ts

#: Labels that carry a workload's version.
VERSION_LABELS = ("version", "app_version", "service_version", "release")
#: A difference counts when the test gives a p-value below this.
SIGNIFICANT_P = 0.01
#: The new version is slower only if this many times slower, and by FRESH_POD_MARGIN times the
#: metric's smallest effect that counts: a freshly started pod (cold caches, a warming JIT) is a few
#: milliseconds slower than a warm one as a rule, which no user notices.
SLOWER_RATIO, FRESH_POD_MARGIN = 2.0, 2.0
#: Fewer samples of either version than this, and a metric is not compared; fewer samples of the
#: new version than NO_WORSE_SAMPLES, and "no worse" is not concluded.
MIN_SAMPLES, NO_WORSE_SAMPLES = 3, 5
#: A new version its rollout says runs, with no sample this many minutes after the rollout's first
#: step while the old version's pods report, is unseen: a pod reports within a scrape interval or two
#: of starting, so minutes of silence mean its pods are not serving or not measured.
UNSEEN_AFTER_MIN = 3.0
#: Labels that name a pod (a sample per pod and minute).
POD_LABELS = ("pod", "instance", "pod_name")


def version_of(labels: dict[str, str]) -> str | None:
    return next((labels[k] for k in VERSION_LABELS if labels.get(k)), None)


def pod_of(labels: dict[str, str]) -> str:
    return next((labels[k] for k in POD_LABELS if labels.get(k)), "")


def emitted_by(labels: dict[str, str], service: str) -> bool:
    """Whether the service's own pods emitted a series: its workload label or its pod names it. A
    caller's side of a call edge (its sidecar's view) is the caller's, whatever the callee."""
    named = next((labels[k] for k in SERVICE_LABELS if labels.get(k)), None)
    if named is not None:
        return named == service
    pod = pod_of(labels)
    if pod:
        return rollup(pod.split(":")[0], {service}) == service
    if "callee" in labels:
        return (labels.get("caller") if side_of(labels) == "client" else labels["callee"]) == service
    return True


@dataclass(frozen=True)
class _Key:
    metric: str
    caller: str
    callee: str
    side: Literal["client", "server"] | None


def compare_versions(
    series: Sequence[MetricSeries],
    *,
    service: str,
    incident: Incident,
    rollout: ChangeRecord | None = None,
    callers: Sequence[MetricSeries] = (),
) -> VersionsData:
    """Compare the versions the service's series run, over the incident's window; ``rollout``, the
    service's rollout in the window where the change sources know one, names the new and the old
    version and the pods of each; ``callers``, the figures of the calls into and out of the service's
    callers (:func:`caller_names`): a release that answers wrongly fails its callers while its own
    figures stay clean."""
    pod_version = {pod: v for v, pods in (rollout.pods if rollout else {}).items() for pod in pods}
    own = [s for s in series if emitted_by(s.labels, service) and not s.name.startswith("node_")]
    labelled: list[tuple[MetricSeries, str]] = []
    unversioned = 0
    for s in own:
        version = version_of(s.labels) or pod_version.get(pod_of(s.labels))
        if version is not None:
            labelled.append((s, version))
        elif pod_of(s.labels):  # a pod's series that could not be placed (a service's aggregates cannot be)
            unversioned += 1
    notes = [f"{unversioned} series of pods of {service} carry no version, nor name a pod of a known one"]
    notes = notes if unversioned else []
    change_id = rollout.id if rollout else None
    start, end = unix(incident.window.start), unix(incident.window.end)
    first_seen = {
        v: min((t for s, sv in labelled if sv == v for t, _ in s.samples if start <= t <= end), default=end)
        for v in {v for _, v in labelled}
    }
    versions = sorted(first_seen)
    new, old = _new_and_old(versions, first_seen, rollout, notes)
    if new is None or not old:
        return _nothing_to_compare(service, versions, rollout, labelled, notes, change_id)
    since = first_seen[new]
    by_key: dict[_Key, dict[str, list[MetricSeries]]] = defaultdict(lambda: defaultdict(list))
    for s, version in labelled:
        if version != new and version not in old:
            continue
        key = _Key(s.name, s.labels.get("caller", ""), s.labels.get("callee", ""), side_of(s.labels))
        by_key[key]["new" if version == new else "old"].append(s)
    comparisons = [
        c
        for key in sorted(by_key, key=lambda k: (k.metric, k.caller, k.callee, k.side))
        if (c := _compare(key, by_key[key], since=since, end=end)) is not None
    ]
    decisive = [c for c in comparisons if c.meaning in ("errors", "latency")]
    worse = [c for c in decisive if c.worse]
    new_samples = max((c.new_samples for c in decisive), default=0)
    verdict: Literal["worse", "no_worse", "unknown"]
    if worse:
        verdict, reason = "worse", "; ".join(_text(c) for c in worse[:3])
    elif any(c.meaning == "errors" for c in decisive) and new_samples >= NO_WORSE_SAMPLES:
        verdict, reason = (
            "no_worse",
            f"no error or latency figure of {new} worse than {', '.join(old)} ({len(decisive)} compared)",
        )
        failed = failing_since(callers, service=service, since=since, end=end)
        if failed:
            verdict = "unknown"
            reason += (
                f", but {failed[0]}, which calls {service}, began failing as {new} began to serve (its "
                f"calls {failed[1]}): a release that answers wrongly fails its callers, not itself"
            )
    else:
        verdict = "unknown"
        reason = (
            "no error or latency figure to compare"
            if not decisive
            else f"{new} has {new_samples} samples so far"
            if new_samples < NO_WORSE_SAMPLES
            else f"no error figure of {new} to compare (a release that fails is not cleared by its latency)"
        )
    pods = _pods(labelled, rollout)
    return VersionsData(
        service=service,
        change_id=change_id,
        new_version=new,
        old_version=", ".join(old),
        started=rollout.ts if rollout else ts(since),
        since=ts(since),
        new_pods=pods.get(new, []),
        old_pods=sorted(p for v in old for p in pods.get(v, [])),
        comparisons=comparisons,
        verdict=verdict,
        reason=reason,
        notes=notes,
    )


def _new_and_old(
    versions: list[str], first_seen: dict[str, float], rollout: ChangeRecord | None, notes: list[str]
) -> tuple[str | None, list[str]]:
    """The new version and the old ones: the rollout's to- and from-version where the series run them,
    else the version that appeared last and the others."""
    if rollout is not None and rollout.to_version in first_seen:
        new = rollout.to_version
        old = [v for v in versions if v == rollout.from_version] or [v for v in versions if v != new]
        return new, old
    if rollout is not None and rollout.to_version and rollout.from_version in first_seen:
        return None, [rollout.from_version]  # the rollout's new version reports nothing
    if rollout is not None and rollout.to_version and len(versions) >= 2:
        notes.append(f"no series runs {rollout.to_version} by name: the version that appeared last counts as new")
    if len(versions) < 2:
        return (None, versions)
    new = max(versions, key=lambda v: (first_seen[v], v))
    return new, [v for v in versions if v != new]


def _nothing_to_compare(
    service: str,
    versions: list[str],
    rollout: ChangeRecord | None,
    labelled: list[tuple[MetricSeries, str]],
    notes: list[str],
    change_id: str | None,
) -> VersionsData:
    """One version only: the rollout's new version unseen (it should run, and reports nothing), or
    nothing to compare."""
    pods = _pods(labelled, rollout)
    if rollout is not None and rollout.to_version and rollout.from_version in versions:
        first_step = moves(rollout)[1] if rollout.steps else rollout.ts
        last = max((t for s, _ in labelled for t, _ in s.samples), default=0.0)
        silent_min = (last - unix(first_step)) / 60
        called = _called_until(labelled)
        base = dict(
            service=service,
            change_id=change_id,
            new_version=rollout.to_version,
            old_version=", ".join(versions),
            started=rollout.ts,
            new_pods=pods.get(rollout.to_version, []),
            old_pods=sorted(p for v in versions for p in pods.get(v, [])),
            notes=notes,
        )
        if silent_min >= UNSEEN_AFTER_MIN:
            if called is not None and called < unix(first_step) + UNSEEN_AFTER_MIN * 60:
                # Its old version's calls stopped too: nothing reached the service (a caller failing
                # before it calls), so no pod of either version had anything to report.
                reason = (
                    f"{rollout.to_version} reports no sample after its rollout's first step at "
                    f"{ts(unix(first_step)):%H:%M}, but nothing calls {service} since {ts(called):%H:%M} "
                    f"({', '.join(versions)}'s calls stop too): its silence says nothing of the release"
                )
                return VersionsData(**base, verdict="unknown", reason=reason)
            reason = (
                f"{rollout.to_version} reports no sample {silent_min:.0f} min after its rollout's first step at "
                f"{ts(unix(first_step)):%H:%M}, while {', '.join(versions)} does: its pods are not serving or not "
                "measured, so it could not be compared"
            )
            return VersionsData(**base, verdict="unseen", reason=reason)
        reason = f"{rollout.to_version} has reported nothing yet ({silent_min:.0f} min after its first step)"
        return VersionsData(**base, verdict="unknown", reason=reason)
    reason = "no series of it carries a version label" if not versions else f"only version {versions[0]} runs"
    if rollout is not None and rollout.to_version and versions:
        reason += f"; its rollout moves {rollout.from_version} -> {rollout.to_version}, which no series names"
    return VersionsData(service=service, change_id=change_id, reason=reason, notes=notes)


def caller_names(series: Sequence[MetricSeries], service: str) -> set[str]:
    """The components whose calls into the service its series record."""
    return {s.labels["caller"] for s in series if s.labels.get("callee") == service and s.labels.get("caller")}


#: A caller that stayed well for this many samples while the new version served was not failed by it.
CLEAN_SAMPLES = 2


def failing_since(calls: Sequence[MetricSeries], *, service: str, since: float, end: float) -> tuple[str, str] | None:
    """The first caller of the service (by name) that began failing as the new version began to serve
    while none of its own calls failed, with what its figure did; None when there is none. ``calls``:
    the error figures of the calls into and out of the service's callers. A caller fails when the
    calls into it do: every sample before ``since`` well, fewer than CLEAN_SAMPLES well after, the rest
    worse than every sample before by at least the metric's smallest effect. One whose calls to another
    callee fail has its failure explained by that callee (its own figures show it), not by an answer
    that was wrong."""
    for caller in sorted(caller_names(calls, service)):
        into = [s for s in calls if s.labels.get("callee") == caller]
        out = [s for s in calls if s.labels.get("caller") == caller and s.labels.get("callee") != service]
        moved = next((m for s in sorted(into, key=_order) if (m := _began_failing(s, since, end, strict=True))), None)
        if moved and not any(_began_failing(s, since, end, strict=False) for s in out):
            return caller, moved
    return None


def _order(s: MetricSeries) -> tuple[str, list[tuple[str, str]]]:
    return s.name, sorted(s.labels.items())


def _began_failing(s: MetricSeries, since: float, end: float, *, strict: bool) -> str | None:
    """What an error figure did, where it began failing at ``since`` (strict: and kept failing,
    fewer than CLEAN_SAMPLES well after it; else: any sample after it worse)."""
    way = bad_way(s.name)
    if meaning_of(s.name) != "errors" or way == "any":
        return None
    sign = 1.0 if way == "up" else -1.0
    before = [sign * v for t, v in s.samples if t < since]
    after = [sign * v for t, v in s.samples if since <= t <= end]
    if len(before) < MIN_SAMPLES or not after:
        return None
    floor = min_effect(SignalDef(query=s.name, unit=unit_of(s.name)))
    worst = max(before)
    bad = [v for v in after if v >= worst + floor]
    if strict and not (len(after) - len(bad) < CLEAN_SAMPLES and median(after) >= worst + floor):
        return None
    if not bad:
        return None
    return f"{s.name} {sign * median(before):g} -> {sign * median(after):g}"


def _called_until(labelled: list[tuple[MetricSeries, str]]) -> float | None:
    """The last minute any of the service's pods reported a call into it (an edge series: its callers'
    calls as the service saw them); None where no series of the service is per call edge."""
    calls = [t for s, _ in labelled if s.labels.get("caller") for t, _ in s.samples]
    return max(calls) if calls else None


def _pods(labelled: list[tuple[MetricSeries, str]], rollout: ChangeRecord | None) -> dict[str, list[str]]:
    """The pods of each version: those the series name, and those the rollout's record names."""
    out: dict[str, set[str]] = defaultdict(set)
    for s, version in labelled:
        if pod_of(s.labels):
            out[version].add(pod_of(s.labels))
    for version, names in (rollout.pods if rollout else {}).items():
        out[version].update(names)
    return {v: sorted(p) for v, p in out.items()}


def _compare(key: _Key, sides: dict[str, list[MetricSeries]], *, since: float, end: float) -> VersionComparison | None:
    """One metric, new version against old, over the minutes both report. Each minute's values are
    aligned on the old version's median that minute before they are ranked (aligned ranks, after
    Hodges and Lehmann, with the old version as each minute's control): a shift every pod makes at
    once (the incident itself, a daily peak) is the minute's, not a version's, and a rollout that
    replaces old pods with new ones over time would otherwise compare early minutes with late ones."""
    new_series = sides.get("new", [])
    new_at: dict[int, list[float]] = defaultdict(list)
    old_at: dict[int, list[float]] = defaultdict(list)
    for s in new_series:
        for t, v in s.samples:
            if since <= t <= end:
                new_at[_minute(t)].append(v)
    for s in sides.get("old", []):
        for t, v in s.samples:
            if since <= t <= end and not any(_carries(s, n, t) for n in new_series):
                old_at[_minute(t)].append(v)
    minutes = sorted(set(new_at) & set(old_at))
    a = [v for m in minutes for v in new_at[m]]
    b = [v for m in minutes for v in old_at[m]]
    if len(minutes) < MIN_SAMPLES or len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES:
        return None
    centre = {m: median(old_at[m]) for m in minutes}
    aligned_a = [v - centre[m] for m in minutes for v in new_at[m]]
    aligned_b = [v - centre[m] for m in minutes for v in old_at[m]]
    spread = len(set(aligned_a) | set(aligned_b)) > 1
    # SciPy is a third of the CLI's import time: paid only by an incident that has two versions to compare
    from scipy.stats import mannwhitneyu

    p = float(mannwhitneyu(aligned_a, aligned_b, alternative="two-sided").pvalue) if spread else 1.0
    new_m, old_m = median(a), median(b)
    meaning, way, unit = meaning_of(key.metric), bad_way(key.metric), unit_of(key.metric)
    floor = min_effect(SignalDef(query=key.metric, unit=unit))
    # How much worse, minute by minute: the median of each minute's difference between the versions.
    step = median(median(new_at[m]) - median(old_at[m]) for m in minutes)
    gap = step if way == "up" else -step if way == "down" else 0.0
    worse = p < SIGNIFICANT_P and gap > 0 and gap >= floor
    if worse and meaning == "latency":
        ratio = median(median(new_at[m]) / max(median(old_at[m]), floor, 1e-12) for m in minutes)
        worse = ratio >= SLOWER_RATIO and gap >= FRESH_POD_MARGIN * floor
    return VersionComparison(
        metric=key.metric,
        meaning=meaning,
        caller=key.caller or None,
        callee=key.callee or None,
        side=key.side or None,
        unit=unit,
        new_median=new_m,
        old_median=old_m,
        new_samples=len(a),
        old_samples=len(b),
        minutes=len(minutes),
        p_value=p,
        worse=worse and meaning != "resources",
    )


def _minute(t: float) -> int:
    """The minute a sample belongs to: samples of one scrape land within seconds of each other."""
    return int(t // 60)


def _carries(old: MetricSeries, new: MetricSeries, at: float) -> bool:
    """Whether an old pod's series carries a new pod's values from some minute on (a replaced pod
    whose series the collector kept, now reporting its successor): at ``at`` and at every minute
    both report after the new pod's first, the same varying values."""
    theirs = {round(t): v for t, v in new.samples}
    shared = [(round(t), v) for t, v in old.samples if round(t) in theirs]
    if len(shared) < MIN_SAMPLES or round(at) not in theirs:
        return False
    varying = len({theirs[t] for t, _ in shared}) > 1
    return varying and all(theirs[t] == v for t, v in shared)


def _text(c: VersionComparison) -> str:
    edge = f" {c.caller}->{c.callee}" if c.callee else ""
    p = f"p={c.p_value:.2g}" if c.p_value is not None else "p=?"
    return (
        f"{c.metric}{edge}: new {c.new_median:.4g} vs old {c.old_median:.4g} ({p}, n={c.new_samples}/{c.old_samples})"
    )
