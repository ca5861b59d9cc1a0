"""Canary analysis: the new version's pods of a service against its old version's, same minutes.

A rollout in progress runs two versions side by side, serving the same traffic. Where series carry
a version label, each metric of the new version's pods is compared with the old version's over the
minutes both ran, with a nonparametric test fit for a handful of one-minute samples (Mann-Whitney U,
as Kayenta does; from SciPy). A new version that fails more, or is slower by a margin that counts,
is strong evidence against its change; one that behaves like the old is evidence for its innocence.
Resource figures (CPU, memory) of freshly started pods differ from warm ones as a rule, so they are
reported but never decide. No I/O here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import Literal

from scipy.stats import mannwhitneyu

from opsagent.analysis.series import min_effect, side_of
from opsagent.fixtures import MetricSeries, SignalDef, unix
from opsagent.models import Incident, VersionComparison, VersionsData
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
#: Labels that name a pod (a sample per pod and minute).
POD_LABELS = ("pod", "instance", "pod_name")


def version_of(labels: dict[str, str]) -> str | None:
    return next((labels[k] for k in VERSION_LABELS if labels.get(k)), None)


def pod_of(labels: dict[str, str]) -> str:
    return next((labels[k] for k in POD_LABELS if labels.get(k)), "")


@dataclass(frozen=True)
class _Key:
    metric: str
    caller: str
    callee: str
    side: Literal["client", "server"] | None


def compare_versions(series: Sequence[MetricSeries], *, service: str, incident: Incident) -> VersionsData:
    """Compare the versions the service's series carry, over the incident's window."""
    labelled = [s for s in series if version_of(s.labels) and not s.name.startswith("node_")]
    versions = sorted({v for s in labelled if (v := version_of(s.labels))})
    if len(versions) < 2:
        reason = "no series of it carries a version label" if not versions else f"only version {versions[0]} runs"
        return VersionsData(service=service, reason=reason)
    start, end = unix(incident.window.start), unix(incident.window.end)
    first_seen = {
        v: min(
            (t for s in labelled if version_of(s.labels) == v for t, _ in s.samples if start <= t <= end), default=end
        )
        for v in versions
    }
    new = max(versions, key=lambda v: (first_seen[v], v))
    old = [v for v in versions if v != new]
    since = first_seen[new]
    by_key: dict[_Key, dict[str, list[MetricSeries]]] = defaultdict(lambda: defaultdict(list))
    for s in labelled:
        side = side_of(s.labels)
        by_key[_Key(s.name, s.labels.get("caller", ""), s.labels.get("callee", ""), side)][
            "new" if version_of(s.labels) == new else "old"
        ].append(s)
    comparisons = [
        c
        for key in sorted(by_key, key=lambda k: (k.metric, k.caller, k.callee, k.side))
        if (c := _compare(key, by_key[key], since=since, end=end)) is not None
    ]
    decisive = [c for c in comparisons if c.meaning in ("errors", "latency")]
    worse = [c for c in decisive if c.worse]
    new_samples = max((c.new_samples for c in decisive), default=0)
    if worse:
        verdict, reason = "worse", "; ".join(_text(c) for c in worse[:3])
    elif decisive and new_samples >= NO_WORSE_SAMPLES:
        verdict, reason = (
            "no_worse",
            f"no error or latency figure of {new} worse than {', '.join(old)} ({len(decisive)} compared)",
        )
    else:
        verdict = "unknown"
        reason = "no error or latency figure to compare" if not decisive else f"{new} has {new_samples} samples so far"
    pods = {v: sorted({pod_of(s.labels) for s in labelled if version_of(s.labels) == v} - {""}) for v in versions}
    return VersionsData(
        service=service,
        new_version=new,
        old_version=", ".join(old),
        since=ts(since),
        new_pods=pods[new],
        old_pods=sorted(p for v in old for p in pods[v]),
        comparisons=comparisons,
        verdict=verdict,
        reason=reason,
    )


def _compare(key: _Key, sides: dict[str, list[MetricSeries]], *, since: float, end: float) -> VersionComparison | None:
    new_series = sides.get("new", [])
    new_points = [(t, v) for s in new_series for t, v in s.samples if since <= t <= end]
    old_points = [
        (t, v)
        for s in sides.get("old", [])
        for t, v in s.samples
        if since <= t <= end and not any(_carries(s, n, t) for n in new_series)
    ]
    if len(new_points) < MIN_SAMPLES or len(old_points) < MIN_SAMPLES:
        return None
    a, b = [v for _, v in new_points], [v for _, v in old_points]
    p = float(mannwhitneyu(a, b, alternative="two-sided").pvalue) if len(set(a) | set(b)) > 1 else 1.0
    new_m, old_m = median(a), median(b)
    meaning, way, unit = meaning_of(key.metric), bad_way(key.metric), unit_of(key.metric)
    floor = min_effect(SignalDef(query=key.metric, unit=unit))
    gap = new_m - old_m if way == "up" else old_m - new_m if way == "down" else 0.0
    worse = p < SIGNIFICANT_P and gap > 0 and gap >= floor
    if worse and meaning == "latency":
        worse = new_m >= SLOWER_RATIO * max(old_m, floor) and gap >= FRESH_POD_MARGIN * floor
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
        p_value=p,
        worse=worse and meaning != "resources",
    )


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
