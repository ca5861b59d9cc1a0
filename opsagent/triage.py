"""Triage: cheap parallel probes over every source, then generic localisation.

Every component is scored from every series it has (catalogued or not) against its baseline, its
self-time shift in traces, its new or bursting error templates, and changes to it just before
onset. The score then propagates along the call graph: a component whose anomaly is explained by
an anomalous callee gives way to it, so the culprit downstream outranks the service that alerted.
Triage names suspects and their features; it does not decide the fault kind (playbooks do).
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from collections.abc import Callable

from pydantic import BaseModel, Field

from opsagent.fixtures import Edge
from opsagent.kubestate import signs
from opsagent.logsummary import FAMILIES, families_of
from opsagent.models import (
    Action,
    ChangeRecord,
    ChangesData,
    Incident,
    KubernetesData,
    LogsData,
    MetricsData,
    Observation,
    SeriesStats,
    SourceKind,
    TracesData,
)
from opsagent.stats import shortfall_ratio
from opsagent.tools import Toolbox

#: A change this long before onset (minutes) still counts as "just before".
CHANGE_LOOKBACK_MIN = 30.0
#: How much of a caller's anomaly an anomalous callee explains away.
EXPLAIN_AWAY = 0.6
#: Features of the requests a component receives: for a callee, its callers' doing.
TRAFFIC = "signal:request_rate:"
#: Features that say a component fails (rather than slows down).
FAILURES = ("signal:availability:", "signal:error_ratio:", "signal:client_error_ratio:", "trace:errors_up")
#: How much of a caller's failures a dependency that only slowed down explains (timeouts).
SLOW_EXPLAINS_FAILING = 0.5
#: The most a component's Kubernetes signs (OOM kills, crash loops…, see opsagent.kubestate) add to its score.
KUBE_CAP = 1.5


class ComponentProfile(BaseModel):
    component: str
    own: float
    score: float
    reachable: bool
    features: dict[str, float] = Field(description="feature -> magnitude, e.g. signal:latency_p99:up")
    evidence: dict[str, str] = Field(default_factory=dict, description="feature -> observation id")
    why: list[str] = Field(default_factory=list)

    def has(self, feature: str) -> bool:
        return feature in self.features


class Triage(BaseModel):
    graph: list[Edge]
    components: list[ComponentProfile]
    observation_ids: list[str]
    source_kinds: list[SourceKind] = Field(description="kinds of source that returned data")
    changes: list[ChangeRecord] = Field(default_factory=list, description="changes around onset")

    def profile(self, component: str) -> ComponentProfile | None:
        return next((c for c in self.components if c.component == component), None)

    def callees(self, component: str) -> list[str]:
        return sorted({e.callee for e in self.graph if e.caller == component})


def _magnitude(s: SeriesStats) -> float:
    if s.direction not in ("up", "down"):
        return 0.0
    # An availability-like ratio moves by its shortfall: 99.9% -> 99% is ten times the failures.
    ratio = (shortfall_ratio(s.baseline_mean, s.window_mean, s.unit) if s.direction == "down" else None) or s.mean_ratio
    if ratio is None or ratio <= 0:
        return 0.0
    ratio = ratio if ratio != math.inf else 1e3
    return min(abs(math.log2(ratio)), 3.0) + 0.25


def descendants(graph: list[Edge], roots: tuple[str, ...]) -> set[str]:
    seen = set(roots)
    frontier = list(roots)
    while frontier:
        node = frontier.pop()
        for e in graph:
            if e.caller == node and e.callee not in seen:
                seen.add(e.callee)
                frontier.append(e.callee)
    return seen


def _anomalous_reach(graph: list[Edge], roots: tuple[str, ...], own: dict[str, float]) -> set[str]:
    """Components the alert can be traced to through anomalous callers: a fault reaches the alerting
    service only through components it disturbs. A component with no telemetry is unknown, not
    quiet, so the path may pass through it; one that shows nothing blocks it."""
    seen = set(roots)
    frontier = list(roots)
    while frontier:
        node = frontier.pop()
        if node not in roots and own.get(node, 0.0) <= 0 and node in own:
            continue
        for e in graph:
            if e.caller == node and e.callee not in seen:
                seen.add(e.callee)
                frontier.append(e.callee)
    return seen


class Profile:
    def __init__(self) -> None:
        self.features: dict[str, float] = {}
        self.evidence: dict[str, str] = {}
        self.why: list[str] = []

    def add(self, feature: str, magnitude: float, obs: Observation, why: str) -> None:
        if magnitude > self.features.get(feature, 0.0):
            self.features[feature] = magnitude
            self.evidence[feature] = obs.id
            self.why.append(why)


async def triage(toolbox: Toolbox, incident: Incident, declared: list[Edge]) -> Triage:
    scan, changes, traces, logs_all, *kube = await asyncio.gather(
        toolbox.call(Action(tool="metrics.scan")),
        toolbox.call(Action(tool="changes.list", args={"before_min": 60})),
        toolbox.call(Action(tool="traces.summary")),
        toolbox.call(Action(tool="logs.summary")),
        *([toolbox.call(Action(tool="kubernetes.pods"))] if toolbox.sources.kubernetes is not None else []),
    )
    graph = list(declared)
    if toolbox.sources.traces is not None and not graph:
        try:
            graph = await toolbox.sources.traces.topology(incident=incident)
        except Exception:  # topology is a nicety; the summary call already reported the source
            graph = []
    log_services = list(logs_all.data.by_service) if isinstance(logs_all.data, LogsData) else []
    per_service = await asyncio.gather(
        *(toolbox.call(Action(tool="logs.summary", args={"service": s})) for s in log_services)
    )
    used = [scan, changes, traces, logs_all, *kube, *per_service]
    profiles = profiles_from(used, incident)
    _add_caller_features(profiles, graph)
    called = {e.callee for e in graph}
    own = {c: _own_score(p.features, called=c in called) for c, p in profiles.items()}
    components = set(own) | {e.caller for e in graph} | called | set(incident.services)
    reach = descendants(graph, incident.services) if graph else components
    traced = {t.service for t in traces.data.services} if isinstance(traces.data, TracesData) else set()
    scores = _propagate(own, graph + _fronted(graph, profiles, traced), profiles)
    carried = _anomalous_reach(graph, incident.services, own) if graph else components
    out = []
    for c in components:
        p = profiles.get(c, Profile())
        reachable = c in reach
        score = scores.get(c, 0.0) * (1.0 if reachable and c in carried else 0.5)
        out.append(
            ComponentProfile(
                component=c,
                own=round(own.get(c, 0.0), 4),
                score=round(score, 4),
                reachable=reachable,
                features=p.features,
                evidence=p.evidence,
                why=p.why,
            )
        )
    out.sort(key=lambda p: (-p.score, p.component))
    kinds = sorted({o.source for o in used if o.ok and o.source is not None and _has_data(o)})
    seen_changes = changes.data.changes if isinstance(changes.data, ChangesData) else []
    return Triage(
        graph=graph, components=out, observation_ids=[o.id for o in used], source_kinds=kinds, changes=seen_changes
    )


def profiles_from(observations: list[Observation], incident: Incident) -> dict[str, Profile]:
    """Features of every component that these observations show, with the observation behind each."""
    profiles: dict[str, Profile] = defaultdict(Profile)
    for obs in observations:
        data = obs.data
        if isinstance(data, MetricsData):
            _metric_features(profiles, obs, data)
        elif isinstance(data, TracesData):
            _trace_features(profiles, obs, data)
        elif isinstance(data, ChangesData):
            _change_features(profiles, obs, data, incident)
        elif isinstance(data, LogsData) and data.service is not None:
            _log_features(profiles[data.service], obs, data, incident)
        elif isinstance(data, KubernetesData):
            for service, feature, magnitude, why in signs(data, onset=incident.onset):
                profiles[service].add(feature, magnitude, obs, why)
    return profiles


def _metric_features(profiles: dict[str, Profile], obs: Observation, data: MetricsData) -> None:
    for s in data.stats:
        mag = _magnitude(s)
        if mag:
            why = f"{s.signal} {s.direction} x{s.mean_ratio:.2f}"
            profiles[s.component].add(f"signal:{s.signal}:{s.direction}", mag, obs, why)
        if s.limit_fraction is not None and s.limit_fraction >= 0.9:
            profiles[s.component].add(f"near_limit:{s.signal}", 1.0, obs, f"{s.signal} at its limit")


def _trace_features(profiles: dict[str, Profile], obs: Observation, data: TracesData) -> None:
    for t in data.services:
        if t.self_shift is not None and t.self_shift >= 1.5 and t.spans_window >= 3:
            mag = min(math.log2(t.self_shift), 3.0) * 1.2
            profiles[t.service].add("trace:self_time_up", mag, obs, f"self time x{t.self_shift:.1f}")
        base_rate = t.origin_errors_baseline / max(t.spans_baseline, 1)
        win_rate = t.origin_errors_window / max(t.spans_window, 1)
        if t.origin_errors_window >= 3 and win_rate >= 3 * base_rate + 0.01:
            profiles[t.service].add("trace:errors_up", 1.0, obs, f"{t.origin_errors_window} error spans born here")
        if t.fanout_shift is not None and t.fanout_shift >= 1.5:
            profiles[t.service].add("trace:fanout_up", 1.0, obs, f"x{t.fanout_shift:.1f} calls per request")
    for svc in data.blocked_parents:
        profiles[svc].add("trace:waiting", 0.01, obs, "time spent waiting on callees")


def _change_features(profiles: dict[str, Profile], obs: Observation, data: ChangesData, incident: Incident) -> None:
    for c in data.changes:
        in_progress = c.end is not None and c.end >= incident.onset
        if 0 <= c.minutes_before_onset <= CHANGE_LOOKBACK_MIN or (c.minutes_before_onset >= 0 and in_progress):
            kind = "deploy" if c.kind in ("deploy", "rollout") else c.kind
            why = f"{c.kind} {c.id} {c.minutes_before_onset:.0f} min before onset"
            profiles[c.service].add(f"change:{kind}", 0.5, obs, why)


def _add_caller_features(profiles: dict[str, Profile], graph: list[Edge]) -> None:
    """What a component's callers show, as ``caller:<feature>``: the failures a shared dependency
    (a resolver, a database) causes are seen by its callers, not by itself."""
    for e in graph:
        caller = profiles.get(e.caller)
        if caller is None:
            continue
        callee = profiles[e.callee]
        for feature, mag in list(caller.features.items()):
            if feature.startswith(("log:", "signal:")):
                key = f"caller:{feature}"
                if mag > callee.features.get(key, 0.0):
                    callee.features[key] = mag
                    callee.evidence[key] = caller.evidence[feature]


def _has_data(obs: Observation) -> bool:
    d = obs.data
    if isinstance(d, MetricsData):
        return bool(d.stats)
    if isinstance(d, LogsData):
        return d.total > 0
    if isinstance(d, TracesData):
        return bool(d.services)
    if isinstance(d, KubernetesData):
        return bool(d.workloads or d.events)
    return isinstance(d, ChangesData)


def _log_features(profile: Profile, obs: Observation, data: LogsData, incident: Incident) -> None:
    window_min = max((incident.window.end - incident.onset).total_seconds() / 60, 1.0)
    scale = window_min / max(incident.baseline.minutes, 1.0)
    for family in FAMILIES:
        n = data.families.get(family, 0)
        expected = data.baseline_families.get(family, 0) * scale
        if n >= 5 and n >= 3 * max(expected, 1.0):
            mag = min(math.log2(n / max(expected, 1.0)) / 4, 1.0)
            profile.add(f"log:{family}", mag, obs, f"{n} '{family}' log lines (baseline {expected:.0f})")
    for t in data.templates:
        if t.new and set(t.levels) & {"error", "fatal"}:
            profile.add("log:new_error", 1.0, obs, f"new error template [{t.id}] x{t.window_count}")
            for fam in families_of(t.sample):
                profile.add(f"log:new:{fam}", 0.5, obs, f"new '{fam}' errors [{t.id}]")


def _own_score(features: dict[str, float], *, called: bool = False) -> float:
    """How anomalous a component is on its own evidence. The requests a component receives are its
    callers' doing (a retry storm, a caller gone quiet), so for a callee they do not count: only
    where traffic arrives from outside (no callers) is a change in it the component's own."""
    metric = sorted(
        (
            v
            for k, v in features.items()
            if k.startswith(("signal:", "near_limit:")) and not (called and k.startswith(TRAFFIC))
        ),
        reverse=True,
    )
    score = (metric[0] + 0.3 * sum(metric[1:4])) if metric else 0.0
    score += features.get("trace:self_time_up", 0.0) * 1.5 + features.get("trace:errors_up", 0.0)
    score += min(sum(v for k, v in features.items() if k.startswith("log:")), 2.0)
    score += min(sum(v for k, v in features.items() if k.startswith("change:")), 0.5)
    score += min(sum(v for k, v in features.items() if k.startswith("kube:")), KUBE_CAP)
    return score


def _fronted(graph: list[Edge], profiles: dict[str, Profile], traced: set[str]) -> list[Edge]:
    """Edges the graph cannot show: an uninstrumented leaf (a load balancer, a remote endpoint, known
    only from its callers' side) may front a sibling its caller also reaches directly.

    A leaf with no spans of its own has unknown callees, while an instrumented sibling's callees are
    known and do not include the leaf. So when both show the same symptom, the sibling's anomaly can
    explain the leaf's (the leaf may sit in front of it) and not the other way round: the leaf is
    given the sibling as a possible callee, and explaining-away does the rest."""
    callees: dict[str, set[str]] = defaultdict(set)
    for e in graph:
        callees[e.caller].add(e.callee)
    out = []
    for below in callees.values():
        for leaf in sorted(below):
            if callees.get(leaf) or leaf in traced or leaf not in profiles:
                continue
            symptoms = _symptoms(profiles[leaf].features)
            for sibling in sorted(below - {leaf}):
                if callees.get(sibling) and sibling in profiles and symptoms & _symptoms(profiles[sibling].features):
                    out.append(Edge(caller=leaf, callee=sibling, source="declared"))
    return out


def _symptoms(features: dict[str, float]) -> set[str]:
    return {k for k in features if k.startswith("signal:") and not k.startswith(TRAFFIC)}


def _propagate(own: dict[str, float], graph: list[Edge], profiles: dict[str, Profile]) -> dict[str, float]:
    """Callers whose anomaly an anomalous callee explains give way; such callees gain a little.

    Failures are explained by failures: a dependency that fails accounts for its callers' errors,
    one that only slowed down accounts for them in part (timeouts), so a failing caller above a
    merely slow dependency keeps most of its own score."""
    callees: dict[str, set[str]] = defaultdict(set)
    callers: dict[str, set[str]] = defaultdict(set)
    for e in graph:
        callees[e.caller].add(e.callee)
        callers[e.callee].add(e.caller)
    failing = {
        n: _own_score({k: v for k, v in p.features.items() if k.startswith(FAILURES)}) for n, p in profiles.items()
    }

    def downstream_max(scores: dict[str, float]) -> Callable[[str, frozenset[str]], float]:
        memo: dict[str, float] = {}

        def walk(node: str, seen: frozenset[str]) -> float:
            if node in memo:
                return memo[node]
            best = 0.0
            for d in callees.get(node, ()):
                if d not in seen:
                    best = max(best, scores.get(d, 0.0), walk(d, seen | {d}))
            memo[node] = best
            return best

        return walk

    below_any, below_failing = downstream_max(own), downstream_max(failing)
    out: dict[str, float] = {}
    for node in set(own) | set(callees) | set(callers):
        mine = own.get(node, 0.0)
        if mine <= 0:
            out[node] = 0.0
            continue
        explained = min(below_any(node, frozenset({node})) / mine, 1.0)
        share = min(failing.get(node, 0.0) / mine, 1.0)
        if share:
            by_failures = min(below_failing(node, frozenset({node})) / mine, 1.0)
            explained = (1 - share) * explained + share * max(by_failures, SLOW_EXPLAINS_FAILING * explained)
        features = profiles[node].features if node in profiles else {}
        if "trace:self_time_up" in features:
            explained *= 0.3  # it is slow on its own, not only waiting
        score = mine * (1 - EXPLAIN_AWAY * explained)
        up = max((own.get(c, 0.0) for c in callers.get(node, ())), default=0.0)
        score += 0.2 * min(up, mine)
        out[node] = score
    return out
