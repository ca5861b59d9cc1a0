"""Triage features: what each observation shows about each component, as named features.

A feature is present when an expectation of the playbooks' vocabulary holds
(:func:`opsagent.playbooks.evaluate`): the rule that makes ``log:new_error`` a triage feature is the
rule a playbook's ``new_errors`` check runs, with the same threshold, written once. How much a
present feature weighs is :mod:`opsagent.ranking`'s business, not this module's.

Feature names (playbooks' ``applies`` and lessons' triggers refer to them):

* ``signal:<signal>:up|down`` a metric of the component shifted; ``near_limit:<signal>`` at its ceiling;
* ``node:<signal>:up|down`` a figure of the node the component runs on (shared with its neighbours);
* ``deps:<signal>:up|down`` the component's view of the calls it makes (a client-side latency);
* ``load:<metric>:up|down`` how much work an unlisted volume metric (bytes, calls) says it was given;
* ``net:path_slow`` calls to or from the component got slower as their callers see them while the
  callees' own view did not: the time is lost between them (a network delay on the component's links);
* ``net:path_failing`` its calls to several callees failed as it saw them while each callee served them
  all: they fail at its end (its client, a configuration pushed to it);
* ``trace:self_time_up``, ``trace:errors_up``, ``trace:fanout_up``, ``trace:waiting``;
* ``change:<kind>`` a change to the component just before onset (weighing less the longer before onset
  it last moved); ``version:worse`` its rollout's new version's pods fail more or are slower than the
  old version's, ``version:no_worse`` they are not, ``version:unseen`` they report nothing at all;
* ``log:<family>`` a log family bursting, ``log:new_error`` new or bursting error templates,
  ``log:new:<family>`` such templates of a family, ``log:new_own_error`` such templates that name no
  dependency's or resource's failure (errors of the component's own making);
* ``kube:oom_killed|crash_loop|image_pull|unschedulable|probe_failed|node_pressure`` what the
  Kubernetes API says of the component's pods, their events and nodes;
* ``mech:capacity:<signal>`` newly used share of a known limit, ``mech:calls_in`` calls into the
  component slowed between the ends: fault mechanisms judged against the incident's other components
  (:mod:`opsagent.mechanisms`);
* ``kube:broken`` an object of the component (a workload, a node, a namespace) is broken and says so,
  with ``kube:<sign>`` saying how (``quota_exceeded``, ``pods_refused``, ``scaled_to_zero``,
  ``scheduler_silent``, ``node_not_ready``, … see :mod:`opsagent.analysis.kube`) and
  ``kube:points_to:<kind>`` the fault kind the broken object points to;
* ``caller:<feature>`` what the component's callers show.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from opsagent import kubestate, mechanisms, ranking
from opsagent.analysis.changes import last_move_before
from opsagent.analysis.edges import SlowEdge, failing_between, links_of, metric_of, slow_paths
from opsagent.fixtures import Edge
from opsagent.logsummary import FAMILIES, families_of
from opsagent.models import (
    ChangeRecord,
    ChangesData,
    Incident,
    KubernetesData,
    LogsData,
    MetricsData,
    Observation,
    SeriesStats,
    TracesData,
    VersionsData,
)
from opsagent.naming import is_volume
from opsagent.observations import times
from opsagent.playbooks import (
    NOT_OWN_FAMILIES,
    Context,
    Expectation,
    evaluate,
    family_counts,
    moved_ratio,
    new_error_templates,
    qualifying_changes,
)

#: A change this long before onset (minutes) still counts as "just before".
CHANGE_LOOKBACK_MIN = 30.0

#: The expectations behind the features: the playbooks' vocabulary, their default thresholds
#: except where named here.
SHIFTED_UP = Expectation(op="increased", min_ratio=1.0)  # the series' own test of a shift decides
SHIFTED_DOWN = Expectation(op="decreased", max_ratio=1.0)
AT_LIMIT = Expectation(op="near_limit", fraction=0.9)
SELF_TIME_UP = Expectation(op="self_time_up")
ERRORS_UP = Expectation(op="errors_up")
FANOUT_UP = Expectation(op="fanout_up")
WAITING = Expectation(op="waiting_on_callees")
CHANGED = Expectation(op="change_before_onset", within_min=CHANGE_LOOKBACK_MIN)
NEW_ERRORS = Expectation(op="new_errors")
OWN_NEW_ERRORS = Expectation(op="new_errors", own=True)


#: The cluster's signs: each feature is present when any of its expectations holds.
KUBE_SIGNS: dict[str, tuple[Expectation, ...]] = {
    "kube:oom_killed": (Expectation(op="terminated", reasons=list(kubestate.OOM)),),
    "kube:crash_loop": (
        Expectation(op="waiting", reasons=list(kubestate.CRASHING)),
        Expectation(op="terminated", reasons=list(kubestate.BAD_EXIT)),
    ),
    "kube:image_pull": (Expectation(op="waiting", reasons=list(kubestate.IMAGE_PULL)),),
    "kube:unschedulable": (Expectation(op="pending"), Expectation(op="kube_event", reasons=["FailedScheduling"])),
    "kube:probe_failed": (Expectation(op="kube_event", reasons=["Unhealthy"], pattern=kubestate.PROBE.pattern),),
    "kube:node_pressure": (Expectation(op="node_pressure"),),
}


def burst(family: str) -> Expectation:
    return Expectation(op="family_burst", family=family)


def new_errors_of(family: str) -> Expectation:
    return Expectation(op="new_errors", family=family)


class Profile:
    """The features of one component, each with its magnitude and the observation behind it."""

    def __init__(self) -> None:
        self.features: dict[str, float] = {}
        self.evidence: dict[str, str] = {}
        self.why: list[str] = []

    def add(self, feature: str, magnitude: float, obs: Observation, why: str) -> None:
        if magnitude > self.features.get(feature, 0.0):
            self.features[feature] = magnitude
            self.evidence[feature] = obs.id
            self.why.append(why)


LINKS_SLOW = Expectation(op="links_slow")
VERSION_WORSE = Expectation(op="version_worse")
VERSION_NO_WORSE = Expectation(op="version_no_worse")
VERSION_UNSEEN = Expectation(op="version_unseen")


def rolled_out(changes: Observation, incident: Incident) -> list[str]:
    """The services a deploy or rollout changed just before onset (or is still changing)."""
    if not isinstance(changes.data, ChangesData):
        return []
    exp = CHANGED.model_copy(update={"kinds": ["deploy", "rollout"]})
    services = sorted({c.service for c in changes.data.changes})
    return [s for s in services if evaluate(exp, changes, Context(incident=incident, service=s)).met]


def profiles_from(observations: Iterable[Observation], incident: Incident) -> dict[str, Profile]:
    """Features of every component that these observations show, with the observation behind each."""
    profiles: dict[str, Profile] = defaultdict(Profile)
    observations = list(observations)
    changed = frozenset(s for o in observations if o.ok for s in rolled_out(o, incident))
    for obs in observations:
        if not obs.ok:
            continue
        data = obs.data
        if isinstance(data, MetricsData):
            _metric_features(profiles, obs, data, incident, changed)
        elif isinstance(data, TracesData):
            _trace_features(profiles, obs, data, incident)
        elif isinstance(data, ChangesData):
            _change_features(profiles, obs, data, incident)
        elif isinstance(data, LogsData) and data.service is not None:
            _log_features(profiles[data.service], obs, data, incident)
        elif isinstance(data, VersionsData):
            _version_features(profiles[data.service], obs, data, incident)
        elif isinstance(data, KubernetesData):
            _kube_features(profiles, obs, data, incident)
    return profiles


def _kube_features(profiles: dict[str, Profile], obs: Observation, data: KubernetesData, incident: Incident) -> None:
    for finding in data.findings:  # a broken object, on the component the analyzer names
        profile = profiles[finding.component]
        profile.add("kube:broken", ranking.OBJECT_WEIGHT, obs, f"{finding.object} broken: {finding.why}")
        profile.add(f"kube:{finding.sign}", ranking.KUBE_WEIGHT, obs, f"{finding.sign} ({finding.field})")
        if finding.kind != "unknown":  # the kind the object points to, for the playbooks of that kind
            profile.add(f"kube:points_to:{finding.kind}", ranking.KUBE_WEIGHT, obs, f"points to {finding.kind}")
    services = sorted({p.service for p in data.pods} | {e.service for e in data.events if e.service})
    for service in services:
        ctx = Context(incident=incident, service=service)
        for feature, expectations in KUBE_SIGNS.items():
            for exp in expectations:
                outcome = evaluate(exp, obs, ctx)
                if outcome.met:
                    profiles[service].add(feature, ranking.KUBE_WEIGHT, obs, f"{feature[5:]}: {outcome.value}")
                    break


def _one(obs: Observation, s: SeriesStats) -> Observation:
    """The observation narrowed to one of its series, so a single-series expectation can read it."""
    return obs.model_copy(update={"data": MetricsData(stats=[s])})


def _metric_features(
    profiles: dict[str, Profile], obs: Observation, data: MetricsData, incident: Incident, changed: frozenset[str]
) -> None:
    failing = failing_between(data) if ranking.on("path_failing") else []
    between = {(e.caller, e.callee, metric_of(e.client)) for e in failing}
    for s in data.stats:
        ctx = Context(incident=incident, service=s.component)
        if s.side == "client" and (s.caller, s.component, metric_of(s)) in between:
            continue  # calls the callee served: they failed at the caller's end or on the wire
        if s.direction not in ("up", "down"):
            at_limit = s.limit_fraction is not None and evaluate(AT_LIMIT, _one(obs, s), ctx).met
            if at_limit and s.scope != "node":
                profiles[s.component].add(f"near_limit:{s.signal}", 1.0, obs, f"{s.signal} at its limit")
            continue
        single = _one(obs, s)
        if not evaluate(SHIFTED_UP if s.direction == "up" else SHIFTED_DOWN, single, ctx).met:
            continue
        mag = ranking.metric_weight(moved_ratio(s))
        ratio = times(s.mean_ratio) if s.mean_ratio is not None else ""
        if s.signal == metric_of(s) and is_volume(s.signal) and s.scope != "node":
            # How much work arrives (bytes, calls): its callers' doing unless traffic enters here.
            profiles[s.component].add(f"load:{s.signal}:{s.direction}", mag, obs, f"{s.signal} {s.direction} {ratio}")
            continue
        if s.scope in ("node", "outbound"):
            # The node's figure (shared by every pod on it), or the component's view of its calls
            # (its dependencies' doing): context, not the component's own anomaly.
            prefix = "node" if s.scope == "node" else "deps"
            why = f"{prefix} {s.signal} {s.direction} {ratio}"
            profiles[s.component].add(f"{prefix}:{s.signal}:{s.direction}", mag, obs, why)
            continue
        profiles[s.component].add(f"signal:{s.signal}:{s.direction}", mag, obs, f"{s.signal} {s.direction} {ratio}")
        if s.limit_fraction is not None and evaluate(AT_LIMIT, single, ctx).met:
            profiles[s.component].add(f"near_limit:{s.signal}", 1.0, obs, f"{s.signal} at its limit")
    _path_features(profiles, obs, data, incident, changed)
    _failing_end_features(profiles, obs, failing)


#: A caller whose calls to at least this many callees failed at its own end (each callee served them)
#: is where they fail: one such link could be the wire to that callee.
FAILING_END_LINKS = 2


def _failing_end_features(profiles: dict[str, Profile], obs: Observation, failing: list[SlowEdge]) -> None:
    """A caller whose calls to several callees failed at its own end (``failing``: the edges that did,
    :func:`~opsagent.analysis.edges.failing_between`) while each callee served them all: its client
    fails them (a configuration pushed to it, new code calling a wrong endpoint)."""
    by_caller: dict[str, list[SlowEdge]] = defaultdict(list)
    for e in failing:
        by_caller[e.caller].append(e)
    for caller, edges in sorted(by_caller.items()):
        callees = sorted({e.callee for e in edges})
        if len(callees) < FAILING_END_LINKS:
            continue
        loudest = max(ranking.metric_weight(moved_ratio(e.client)) for e in edges)
        why = f"its calls to {', '.join(callees)} failed at its end while each callee served them all"
        profiles[caller].add("net:path_failing", loudest, obs, why)


def _path_features(
    profiles: dict[str, Profile], obs: Observation, data: MetricsData, incident: Incident, changed: frozenset[str]
) -> None:
    """A component most of whose measured links got slow on the path is where the delay sits: a
    network fault on a component's interface slows every call to and from it.

    A link whose other end was ``changed`` just before onset (and this end was not) is that change's
    doing: new code at one end (a call to the wrong endpoint, a new timeout) slows the link as a
    network fault at the other would, and the change came first."""
    if not ranking.on("path_slow"):
        return
    for component in sorted({e.caller for e in slow_paths(data)} | {e.callee for e in slow_paths(data)}):
        outcome = evaluate(LINKS_SLOW, obs, Context(incident=incident, service=component))
        if not outcome.met:
            continue
        links = links_of(data, component)
        own = [
            e
            for e in links.slow
            if component in changed or (e.callee if e.caller == component else e.caller) not in changed
        ]
        if own:
            loudest = max(ranking.metric_weight(e.client.mean_ratio) for e in own)
            profiles[component].add("net:path_slow", loudest * len(own) / links.measured, obs, outcome.value)


def _trace_features(profiles: dict[str, Profile], obs: Observation, data: TracesData, incident: Incident) -> None:
    for t in data.services:
        ctx = Context(incident=incident, service=t.service)
        if t.self_shift is not None and evaluate(SELF_TIME_UP, obs, ctx).met:
            mag = ranking.self_time_weight(t.self_shift)
            profiles[t.service].add("trace:self_time_up", mag, obs, f"self time x{t.self_shift:.1f}")
        if evaluate(ERRORS_UP, obs, ctx).met:
            why = f"{t.origin_errors_window} error spans born here"
            profiles[t.service].add("trace:errors_up", ranking.TRACE_ERRORS_WEIGHT, obs, why)
        if t.fanout_shift is not None and evaluate(FANOUT_UP, obs, ctx).met:
            why = f"{times(t.fanout_shift)} calls per request"
            profiles[t.service].add("trace:fanout_up", ranking.FANOUT_WEIGHT, obs, why)
        if evaluate(WAITING, obs, ctx).met:
            profiles[t.service].add("trace:waiting", ranking.WAITING_WEIGHT, obs, "time spent waiting on callees")


def _change_features(profiles: dict[str, Profile], obs: Observation, data: ChangesData, incident: Incident) -> None:
    for service in sorted({c.service for c in data.changes}):
        ctx = Context(incident=incident, service=service)
        for kind in ("deploy", "config", "flag", "infra", "scale"):
            kinds = ["deploy", "rollout"] if kind == "deploy" else [kind]
            exp = CHANGED.model_copy(update={"kinds": kinds})
            outcome = evaluate(exp, obs, ctx)
            if outcome.met:
                timing = max(
                    ranking.change_timing(minutes_before(c, incident)) for c in qualifying_changes(exp, obs, ctx) or []
                )
                profiles[service].add(f"change:{kind}", ranking.CHANGE_WEIGHT * timing, obs, outcome.value)


def minutes_before(change: ChangeRecord, incident: Incident) -> float | None:
    """Minutes from the change's last move (its start or a step) before onset to onset; None when it
    moved only after onset."""
    moved = last_move_before(change, incident.onset)
    return None if moved is None else (incident.onset - moved[1]).total_seconds() / 60


def own_error_lines(data: LogsData) -> int:
    """Lines of new or bursting error templates that name no dependency's or resource's failure."""
    return sum(t.window_count for t in new_error_templates(data, exclude=NOT_OWN_FAMILIES))


def _log_features(profile: Profile, obs: Observation, data: LogsData, incident: Incident) -> None:
    ctx = Context(incident=incident, service=data.service or "")
    for family in FAMILIES:
        if data.families.get(family) and evaluate(burst(family), obs, ctx).met:
            n, expected = family_counts(family, data, incident)
            why = f"{n} '{family}' log lines (baseline {expected:.0f})"
            profile.add(f"log:{family}", ranking.log_burst_weight(n, expected), obs, why)
    if not evaluate(NEW_ERRORS, obs, ctx).met:
        return
    found = new_error_templates(data)
    lines = sum(t.window_count for t in found)
    why = f"{len(found)} new or bursting error template(s), {lines} lines: [{found[0].id}]"
    profile.add("log:new_error", ranking.new_error_weight(lines), obs, why)
    own = evaluate(OWN_NEW_ERRORS, obs, ctx)
    if own.met:
        profile.add("log:new_own_error", ranking.own_error_weight(own_error_lines(data)), obs, own.value)
    for family in sorted({f for t in found for f in families_of(t.sample)}):
        if evaluate(new_errors_of(family), obs, ctx).met:
            profile.add(f"log:new:{family}", ranking.NEW_FAMILY_WEIGHT, obs, f"new '{family}' errors")


def _version_features(profile: Profile, obs: Observation, data: VersionsData, incident: Incident) -> None:
    ctx = Context(incident=incident, service=data.service)
    for feature, exp, weight in (
        ("version:worse", VERSION_WORSE, ranking.VERSION_WORSE_WEIGHT),
        ("version:unseen", VERSION_UNSEEN, ranking.VERSION_UNSEEN_WEIGHT),
        ("version:no_worse", VERSION_NO_WORSE, ranking.WAITING_WEIGHT),
    ):
        outcome = evaluate(exp, obs, ctx)
        if outcome.met:
            profile.add(feature, weight, obs, outcome.value)


def add_mechanism_features(
    profiles: dict[str, Profile], observations: list[Observation], graph: Sequence[Edge] = ()
) -> dict[str, str]:
    """``mech:<detector>`` features: each fault mechanism's evidence, weighed by how surprising it is
    against the other components of the same incident (:mod:`opsagent.mechanisms`). Returns, per
    detector, what it ran over or why it could not run."""
    if not ranking.on("mechanisms"):
        return {}
    by_id = {o.id: o for o in observations}
    found: dict[str, dict[str, mechanisms.Finding]] = defaultdict(dict)
    own: dict[str, tuple[float, str]] = {}
    for obs in observations:
        data = obs.data
        if obs.ok and isinstance(data, LogsData) and data.service is not None:
            own[data.service] = (own_error_lines(data) / max(data.window_minutes, 1.0), obs.id)
    found_by = mechanisms.findings(observations, graph, paths=ranking.on("fixed_paths"))
    every = [*found_by, *mechanisms.own_error_findings(own)]
    for f in every:
        weight = mechanisms.mechanism_weight(f.surprise)
        if weight > 0:
            found[f.component][f.feature] = f
    for component, per in sorted(found.items()):
        kept = mechanisms.explained_within({k: v.surprise for k, v in per.items()})
        for feature in sorted(kept):
            f = per[feature]
            why = f"{f.why}; x{f.surprise:.0f} the spread of the other components"
            profiles[component].add(feature, mechanisms.mechanism_weight(f.surprise), by_id[f.observation], why)
    return mechanisms.coverage(observations, every)


def add_caller_features(profiles: dict[str, Profile], graph: list[Edge]) -> None:
    """What a component's callers show, as ``caller:<feature>``: the failures a shared dependency
    (a resolver, a database) causes are seen by its callers, not by itself."""
    for e in sorted(graph, key=lambda e: (e.caller, e.callee)):
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


def out_of_service(observations: Iterable[Observation]) -> set[str]:
    """Services a broken Kubernetes object leaves without a ready pod (a quota's namespace takes the
    workloads it refuses, a node that is down the services on it); a workload short-handed but still
    serving is not among them."""
    out: set[str] = set()
    for obs in observations:
        if obs.ok and isinstance(obs.data, KubernetesData):
            for finding in obs.data.findings:
                out.update(finding.affects)
    return out


def has_data(obs: Observation) -> bool:
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
