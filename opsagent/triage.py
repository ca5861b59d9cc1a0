"""Triage: cheap parallel probes over every source, then generic localisation.

Every component is scored from every series it has (catalogued or not) against its baseline, its
self-time shift in traces, its new or bursting error templates, and changes to it just before
onset. The score then propagates along the call graph: a component whose anomaly is explained by
an anomalous callee gives way to it, so the culprit downstream outranks the service that alerted.
Triage names suspects and their features; it does not decide the fault kind (playbooks do).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from pydantic import BaseModel, Field

from opsagent import ranking
from opsagent.fixtures import Edge
from opsagent.graph import descendants
from opsagent.logsummary import FAMILIES, families_of
from opsagent.models import (
    Action,
    ChangeRecord,
    ChangesData,
    Incident,
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


def _metric_magnitude(s: SeriesStats) -> float:
    if s.direction not in ("up", "down"):
        return 0.0
    # An availability-like ratio moves by its shortfall: 99.9% -> 99% is ten times the failures.
    shortfall = shortfall_ratio(s.baseline_mean, s.window_mean, s.unit) if s.direction == "down" else None
    return ranking.metric_weight(shortfall or s.mean_ratio)


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
    scan, changes, traces, logs_all = await asyncio.gather(
        toolbox.call(Action(tool="metrics.scan")),
        toolbox.call(Action(tool="changes.list", args={"before_min": 60})),
        toolbox.call(Action(tool="traces.summary")),
        toolbox.call(Action(tool="logs.summary")),
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
    used = [scan, changes, traces, logs_all, *per_service]
    profiles = profiles_from(used, incident)
    _add_caller_features(profiles, graph)
    called = {e.callee for e in graph}
    own = {c: ranking.own_score(p.features, called=c in called) for c, p in profiles.items()}
    components = set(own) | {e.caller for e in graph} | called | set(incident.services)
    reach = descendants(graph, incident.services) if graph else components
    traced = {t.service for t in traces.data.services} if isinstance(traces.data, TracesData) else set()
    features = {c: p.features for c, p in profiles.items()}
    scores = ranking.propagate(own, graph + ranking.fronted(graph, features, traced), features)
    carried = ranking.anomalous_reach(graph, incident.services, own) if graph else components
    out = []
    for c in components:
        p = profiles.get(c, Profile())
        reachable = c in reach
        score = scores.get(c, 0.0) * ranking.reach_weight(c, reachable=reachable, carried=carried)
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
    return profiles


def _metric_features(profiles: dict[str, Profile], obs: Observation, data: MetricsData) -> None:
    for s in data.stats:
        mag = _metric_magnitude(s)
        if mag:
            why = f"{s.signal} {s.direction} x{s.mean_ratio:.2f}"
            profiles[s.component].add(f"signal:{s.signal}:{s.direction}", mag, obs, why)
        if s.limit_fraction is not None and s.limit_fraction >= 0.9:
            profiles[s.component].add(f"near_limit:{s.signal}", 1.0, obs, f"{s.signal} at its limit")


def _trace_features(profiles: dict[str, Profile], obs: Observation, data: TracesData) -> None:
    for t in data.services:
        if t.self_shift is not None and t.self_shift >= 1.5 and t.spans_window >= 3:
            mag = ranking.self_time_weight(t.self_shift)
            profiles[t.service].add("trace:self_time_up", mag, obs, f"self time x{t.self_shift:.1f}")
        base_rate = t.origin_errors_baseline / max(t.spans_baseline, 1)
        win_rate = t.origin_errors_window / max(t.spans_window, 1)
        if t.origin_errors_window >= 3 and win_rate >= 3 * base_rate + 0.01:
            profiles[t.service].add("trace:errors_up", 1.0, obs, f"{t.origin_errors_window} error spans born here")
        if t.fanout_shift is not None and t.fanout_shift >= 1.5:
            profiles[t.service].add("trace:fanout_up", 1.0, obs, f"x{t.fanout_shift:.1f} calls per request")
    for svc in data.blocked_parents:
        profiles[svc].add("trace:waiting", ranking.WAITING_WEIGHT, obs, "time spent waiting on callees")


def _change_features(profiles: dict[str, Profile], obs: Observation, data: ChangesData, incident: Incident) -> None:
    for c in data.changes:
        in_progress = c.end is not None and c.end >= incident.onset
        if 0 <= c.minutes_before_onset <= CHANGE_LOOKBACK_MIN or (c.minutes_before_onset >= 0 and in_progress):
            kind = "deploy" if c.kind in ("deploy", "rollout") else c.kind
            why = f"{c.kind} {c.id} {c.minutes_before_onset:.0f} min before onset"
            profiles[c.service].add(f"change:{kind}", ranking.CHANGE_WEIGHT, obs, why)


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
    return isinstance(d, ChangesData)


def _log_features(profile: Profile, obs: Observation, data: LogsData, incident: Incident) -> None:
    window_min = max((incident.window.end - incident.onset).total_seconds() / 60, 1.0)
    scale = window_min / max(incident.baseline.minutes, 1.0)
    for family in FAMILIES:
        n = data.families.get(family, 0)
        expected = data.baseline_families.get(family, 0) * scale
        if n >= 5 and n >= 3 * max(expected, 1.0):
            mag = ranking.log_burst_weight(n, expected)
            profile.add(f"log:{family}", mag, obs, f"{n} '{family}' log lines (baseline {expected:.0f})")
    for t in data.templates:
        if t.new and set(t.levels) & {"error", "fatal"}:
            profile.add(
                "log:new_error", ranking.NEW_ERROR_WEIGHT, obs, f"new error template [{t.id}] x{t.window_count}"
            )
            for fam in families_of(t.sample):
                profile.add(f"log:new:{fam}", ranking.NEW_FAMILY_WEIGHT, obs, f"new '{fam}' errors [{t.id}]")
