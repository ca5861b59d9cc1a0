"""Triage: cheap parallel probes over every source, then generic localisation.

Every component is scored from every series it has (catalogued or not) against its baseline, its
self-time shift in traces, its new or bursting error templates, and changes to it just before
onset. The score then propagates along the call graph: a component whose anomaly is explained by
an anomalous callee gives way to it, so the culprit downstream outranks the service that alerted.
Triage names suspects and their features; it does not decide the fault kind (playbooks do).
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field

from opsagent import ranking
from opsagent.environment import releases_of, taken_down_by
from opsagent.features import (
    Profile,
    add_caller_features,
    add_mechanism_features,
    has_data,
    out_of_service,
    profiles_from,
    rolled_out,
)
from opsagent.fixtures import Edge
from opsagent.graph import descendants
from opsagent.mechanisms import placed_in
from opsagent.models import (
    Action,
    ChangeRecord,
    ChangesData,
    Incident,
    LessonEffect,
    LogsData,
    SourceKind,
    TracesData,
)
from opsagent.tools import Toolbox


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
    read_ids: list[str] = Field(
        default_factory=list,
        description="the observations a reasoner reads of triage (the broad probes); the per-service log "
        "summaries behind the log features are read, and charged, when a check asks for one",
    )
    source_kinds: list[SourceKind] = Field(description="kinds of source that returned data")
    changes: list[ChangeRecord] = Field(default_factory=list, description="changes around onset")
    detectors: dict[str, str] = Field(
        default_factory=dict, description="per fault-mechanism detector: what it ran over, or why it could not run"
    )
    learned: list[LessonEffect] = Field(
        default_factory=list, description="what environment lessons did to evidence and priors (opsagent.environment)"
    )
    releases: dict[str, list[str]] = Field(
        default_factory=dict,
        description="each component's new releases out in this incident (its ReplicaSets: environment.releases_of)",
    )

    def profile(self, component: str) -> ComponentProfile | None:
        return next((c for c in self.components if c.component == component), None)

    def callees(self, component: str) -> list[str]:
        return sorted({e.callee for e in self.graph if e.caller == component})


async def triage(toolbox: Toolbox, incident: Incident, declared: list[Edge]) -> Triage:
    scan, changes, traces, logs_all, *kube = await asyncio.gather(
        toolbox.call(Action(tool="metrics.scan")),
        toolbox.call(Action(tool="changes.list", args={"before_min": 60})),
        toolbox.call(Action(tool="traces.summary")),
        toolbox.call(Action(tool="logs.summary")),
        *([toolbox.call(Action(tool="kubernetes.pods"))] if toolbox.sources.kubernetes is not None else []),
    )
    graph = list(declared)
    traces_source = toolbox.sources.traces
    if traces_source is not None and not graph:  # a nicety: held to the call limits, [] when it fails
        graph = await toolbox.bounded(traces_source.name, traces_source.topology(incident=incident), [])
    log_services = list(logs_all.data.by_service) if isinstance(logs_all.data, LogsData) else []
    per_service = await asyncio.gather(
        *(toolbox.call(Action(tool="logs.summary", args={"service": s})) for s in log_services)
    )
    # Every service rolled out just before onset: does its new version behave like the old one?
    versions = await asyncio.gather(
        *(toolbox.call(Action(tool="metrics.versions", args={"service": s})) for s in rolled_out(changes, incident))
    )
    used = [scan, changes, traces, logs_all, *kube, *per_service, *versions]
    profiles = profiles_from(used, incident)
    detectors = add_mechanism_features(profiles, used, graph)
    ranking.weigh_by_specificity({c: p.features for c, p in profiles.items()}, graph)
    ranking.weigh_by_elimination({c: p.features for c, p in profiles.items()})
    add_caller_features(profiles, graph)
    called = {e.callee for e in graph}
    broken = out_of_service(used)
    ranking.unown_errors({c: p.features for c, p in profiles.items()}, graph, broken)
    components = set(profiles) | {e.caller for e in graph} | called | set(incident.services)
    memory = toolbox.environment
    releases = releases_of(used)
    learned = (
        memory.calibrate({c: p.features for c, p in profiles.items()}, components, releases=releases) if memory else []
    )
    own = {c: ranking.own_score(p.features, called=c in called) for c, p in profiles.items()}
    own = ranking.explain_by_out_of_service(own, graph, broken)
    reach = descendants(graph, incident.services) if graph else components
    traced = {t.service for t in traces.data.services} if isinstance(traces.data, TracesData) else set()
    features = {c: p.features for c, p in profiles.items()}
    scores = ranking.propagate(own, graph + ranking.fronted(graph, features, traced), features)
    if memory is not None:  # what this environment's past causes make likely, shown beside the evidence
        scores, raised = memory.prior(scores, components, taken_down=taken_down_by(used))
        learned += raised
    carried = ranking.anomalous_reach(graph, incident.services, own) if graph else components
    out = []
    for c in components:
        p = profiles.get(c) or Profile()
        reachable = c in reach
        placed = placed_in(p.features)
        score = scores.get(c, 0.0) * ranking.reach_weight(c, reachable=reachable, carried=carried, placed=placed)
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
    kinds = sorted({o.source for o in used if o.ok and o.source is not None and has_data(o)})
    seen_changes = changes.data.changes if isinstance(changes.data, ChangesData) else []
    return Triage(
        graph=graph,
        components=out,
        observation_ids=[o.id for o in used],
        read_ids=[o.id for o in [scan, changes, traces, logs_all, *kube, *versions]],
        source_kinds=kinds,
        changes=seen_changes,
        detectors=detectors,
        learned=learned,
        releases={c: sorted(r) for c, r in sorted(releases.items())},
    )
