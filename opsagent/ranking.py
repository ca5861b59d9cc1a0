"""How suspects and hypotheses are ranked: every number that orders them, named, in one place.

What counts as evidence is decided elsewhere (:mod:`opsagent.features` over the playbooks'
expectation vocabulary): a feature is present or it is not. This module says how much a present
feature weighs, how a component's score follows from its own features and its neighbours'
(explaining away along the call graph), how hypotheses are scored and kept for the beam, and how
the final suspects are ordered. "Why was X ranked above Y" is answered here.

Each localisation rule has a name in :data:`RULES`; :func:`without` switches rules off for a
block of code, so a benchmark can report what each rule buys on each data set (AC@1 with the rule
removed). Investigations never switch rules off.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Literal

from opsagent.fixtures import Edge
from opsagent.graph import callees_of, callers_of, descendants, reached
from opsagent.mechanisms import CALLER_SIDE, placed_in
from opsagent.models import CHANGE_KINDS, ChangeSuspect, Hypothesis, HypothesisResult, ProvenRival, Suspect

# ---------------------------------------------------------------- rules that can be switched off

#: The localisation rules, by name, with what each stands for.
RULES: dict[str, str] = {
    "callee_traffic": "the requests a callee receives are its callers' doing, not its own anomaly",
    "mirrors": "an uninstrumented leaf with its sibling's symptom may front that sibling",
    "failures": "failures are explained by failures; a merely slow dependency explains half of them",
    "anomalous_path": "a component the alert reaches only through quiet components gets half its score",
    "diversity": "the beam prefers the hypothesis that explains what the ones before it leave unexplained",
    "specificity": "a metric shift seen in many places that do not call each other tells less about each",
    "peer_noise": "a shift the same metric of other components makes between samples before onset is noise",
    "node_scope": "node-level series belong to the node, not to every component on it",
    "outbound": "a component's client-side latency is its dependencies' doing",
    "volume": "bytes, calls and other volume metrics of a callee are its callers' doing",
    "named_direction": "an unlisted metric goes bad the way its name says (latency up, success down)",
    "path_slow": "calls slow between the two ends of an edge put the delay on the links of a component",
    "spike_free": "one spike among a handful of normal samples is not a series' spread",
    "brief": "one sample's excursion after onset, no farther than the series went before onset, is not a shift",
    "path_failing": "calls a caller saw fail while the callee served them fail at the caller's end, not the callee's",
    "failures_first": "a component's own failures weigh more than a shift in how fast it is",
    "discovery": "metric names the catalog has never seen map to its signals by convention",
    "mechanisms": "fault mechanisms (capacity used, calls into a component slowed) judged against the "
    "incident's other components weigh by how clearly they stand out",
    "fixed_paths": "a step the code always took next, now missing in most requests, has vanished however few "
    "requests came",
    "out_of_service": "a caller whose dependency is out of service (a broken Kubernetes object) is not the cause",
    "clear_first": "an unproven cause whose kind is what telling evidence of its component shows (a mechanism "
    "that stood out in this incident, an object broken and saying why) ranks before less telling ones",
    "elimination": "a rollout whose new version reports nothing, when every other rollout in flight was cleared, "
    "is the change left: it weighs as much as one measured worse",
}

_disabled: ContextVar[frozenset[str]] = ContextVar("opsagent_disabled_rules", default=frozenset())


def on(rule: str) -> bool:
    """Whether a rule is in force (always, outside an ablation)."""
    if rule not in RULES:
        raise KeyError(f"unknown ranking rule {rule!r}")
    return rule not in _disabled.get()


@contextmanager
def without(*rules: str) -> Iterator[None]:
    """Switch rules off inside the block (for ablation benchmarks only)."""
    unknown = [r for r in rules if r not in RULES]
    if unknown:
        raise KeyError(f"unknown ranking rule(s): {', '.join(unknown)}; known: {', '.join(RULES)}")
    token = _disabled.set(_disabled.get() | frozenset(rules))
    try:
        yield
    finally:
        _disabled.reset(token)


# ---------------------------------------------------------------- how much a feature weighs

#: A metric shift's weight is log2 of its ratio, capped here (x8): beyond it, bigger is not likelier.
METRIC_LOG2_CAP = 3.0
#: Added to every metric shift that counts, so a small real shift outweighs no shift.
METRIC_FLOOR = 0.25
#: What an infinite ratio (a series rising from zero) counts as, before the cap.
INFINITE_RATIO = 1e3
#: Self time up by x(2^k) weighs k (capped like metrics) times this: a component slow on its own.
SELF_TIME_WEIGHT = 1.2
#: A log family bursting n times its baseline weighs log2(n)/this, capped at 1.
LOG_BURST_DIVISOR = 4.0
#: New or bursting error templates weigh NEW_ERROR_WEIGHT up to seven lines, growing with log2 of
#: their lines beyond, up to twice that; each log family among them, NEW_FAMILY_WEIGHT.
NEW_ERROR_WEIGHT, NEW_FAMILY_WEIGHT = 2.0, 0.5
#: Error spans born in a component, and more calls per request, each weigh this.
TRACE_ERRORS_WEIGHT, FANOUT_WEIGHT = 1.0, 1.0
#: A change just before onset weighs this (less, the longer before onset it last moved: change_timing).
CHANGE_WEIGHT = 0.5
#: A rollout whose new version fails more or is slower than its old one, on the same minutes and
#: traffic, weighs this: as much as the loudest metric shift, for it is the change compared with itself.
VERSION_WORSE_WEIGHT = 3.0
#: A rollout whose new version reports nothing while its old one does weighs this: it cannot be
#: cleared, and a release whose pods do not serve is unwell, but nothing was measured to be worse.
VERSION_UNSEEN_WEIGHT = 1.5
#: Waiting on callees says where not to look; it barely weighs.
WAITING_WEIGHT = 0.01


def metric_weight(ratio: float | None) -> float:
    """The weight of a metric shift by its ratio (window level / normal level)."""
    if ratio is None or ratio <= 0:
        return 0.0
    ratio = ratio if ratio != math.inf else INFINITE_RATIO
    return min(abs(math.log2(ratio)), METRIC_LOG2_CAP) + METRIC_FLOOR


def self_time_weight(shift: float) -> float:
    return min(math.log2(shift), METRIC_LOG2_CAP) * SELF_TIME_WEIGHT


def log_burst_weight(count: int, expected: float) -> float:
    return min(math.log2(count / max(expected, 1.0)) / LOG_BURST_DIVISOR, 1.0)


def own_error_weight(lines: int) -> float:
    """New errors of the component's own making (no dependency's failure named) weigh again as much
    as new errors: the component says itself that its code went wrong."""
    return new_error_weight(lines) * OWN_ERROR_SHARE


#: What new errors of a component's own making add, as a share of the weight of new errors.
OWN_ERROR_SHARE = 1.0


def new_error_weight(lines: int) -> float:
    return NEW_ERROR_WEIGHT * min(max(math.log2(1 + lines) / 3, 1.0), 2.0)


def specificity(share: float, components: int) -> float:
    """How much a feature says about a component when ``share`` of the incident's components show
    it: 1 when only this one does, falling like inverse document frequency (log(N/n) / log N) as it
    spreads, never below SPECIFICITY_FLOOR. A metric that shifts in a third of the services at once
    is the environment's weather (a noisy exporter, a shared dependency), not this service's fault."""
    if not on("specificity") or components < SPECIFICITY_MIN_COMPONENTS or share <= 0:
        return 1.0
    n = max(share * components, 1.0)
    return max(math.log(components / n) / math.log(components), SPECIFICITY_FLOOR)


#: Below this many components, how widespread a shift is says nothing.
SPECIFICITY_MIN_COMPONENTS = 5
#: The least a widespread shift still weighs, as a share of its weight.
SPECIFICITY_FLOOR = 0.2
#: Features whose weight depends on how widespread they are.
SPECIFIC_PREFIXES = ("signal:", "near_limit:", "load:")


def weigh_by_specificity(features: Mapping[str, dict[str, float]], graph: Sequence[Edge]) -> None:
    """Scale each metric feature by how few unconnected places show it (in place).

    The components that show a feature are grouped along the call graph: a shift spreading from a
    callee to its callers (a cascade) is one place, however many components it reaches, and
    explaining-away sorts out where it started. The same shift in many places that do not call
    each other is the environment's weather (a noisy exporter, a shared dependency)."""
    components = len(features)
    holders: dict[str, set[str]] = {}
    for component, found in features.items():
        for name in found:
            if name.startswith(SPECIFIC_PREFIXES):
                holders.setdefault(name, set()).add(component)
    neighbours: dict[str, set[str]] = {}
    for e in graph:
        neighbours.setdefault(e.caller, set()).add(e.callee)
        neighbours.setdefault(e.callee, set()).add(e.caller)
    places = {name: _clusters(members, neighbours) for name, members in holders.items()}
    for found in features.values():
        for name in list(found):
            if name in places:
                found[name] = found[name] * specificity(places[name] / components, components)


def _clusters(members: set[str], neighbours: Mapping[str, set[str]]) -> int:
    """How many groups the members form, joined where one calls another."""
    left, groups = set(members), 0
    while left:
        groups += 1
        frontier = [min(left)]
        left.discard(frontier[0])
        while frontier:
            node = frontier.pop()
            for other in sorted(neighbours.get(node, set()) & left):
                left.discard(other)
                frontier.append(other)
    return groups


def weigh_by_elimination(features: Mapping[str, dict[str, float]]) -> None:
    """Concurrent rollouts compete (in place): where every other rollout whose versions were compared
    behaves like its old version on the same minutes (``version:no_worse``), the one rollout whose new
    version reports nothing is the change left, and weighs as much as one measured worse."""
    if not on("elimination"):
        return
    unseen = [c for c, f in features.items() if "version:unseen" in f]
    cleared = [c for c, f in features.items() if "version:no_worse" in f]
    open_ = [c for c, f in features.items() if "version:worse" in f]
    if len(unseen) == 1 and cleared and not open_:
        features[unseen[0]]["version:unseen"] = VERSION_WORSE_WEIGHT


# ---------------------------------------------------------------- a component's own score

#: Features of the requests (and other work) a component receives: for a callee, its callers' doing.
TRAFFIC = ("signal:request_rate:", "load:")
#: Features that say a component fails (rather than slows down).
FAILURES = (
    "signal:availability:",
    "signal:error_ratio:",
    "signal:client_error_ratio:",
    "trace:errors_up",
    "log:new_error",
    "log:new_own_error",
    "log:new:",
    "net:path_failing",
)
#: A component's own failures (its success rate down, its errors up) weigh this many times a shift
#: in how it performs: failing is what the component says of itself; slowness may be inherited.
FAILING_FACTOR = 1.5
#: Beyond its loudest metric, each of the next three counts this much.
NEXT_METRICS = 0.3
#: How much a self-time shift counts against metrics (traces measure the component itself).
SELF_TIME_FACTOR = 1.5
#: Caps on what logs and changes add to a component's own score.
LOG_CAP, CHANGE_CAP = 3.5, 0.5
#: A sign the Kubernetes API gives of a component (an OOM kill, a crash loop, … see opsagent.features)
#: weighs this; together they add at most KUBE_CAP: the cluster says *that* pods fail, not why.
KUBE_WEIGHT, KUBE_CAP = 0.75, 1.5
#: An object that is broken and says so (a workload short of ready replicas, pods the API refuses, a
#: node not ready): categorical evidence, so it weighs as much as the loudest logs can.
OBJECT_WEIGHT = 4.0


def own_score(features: Mapping[str, float], *, called: bool = False) -> float:
    """How anomalous a component is on its own evidence. The requests a component receives are its
    callers' doing (a retry storm, a caller gone quiet), so for a callee they do not count: only
    where traffic arrives from outside (no callers) is a change in it the component's own."""
    skip_traffic = called and on("callee_traffic")
    failing = FAILING_FACTOR if on("failures_first") else 1.0
    metric = sorted(
        (
            v * (failing if k.startswith(FAILURES) else 1.0)
            for k, v in features.items()
            if k.startswith(("signal:", "near_limit:", "load:")) and not (skip_traffic and k.startswith(TRAFFIC))
        ),
        reverse=True,
    )
    score = (metric[0] + NEXT_METRICS * sum(metric[1:4])) if metric else 0.0
    # Calls to and from it slow between the ends: measured on its links, as strong as its own metrics.
    score += features.get("net:path_slow", 0.0)
    score += features.get("net:path_failing", 0.0) * failing
    score += features.get("trace:self_time_up", 0.0) * SELF_TIME_FACTOR + features.get("trace:errors_up", 0.0)
    score += min(sum(v for k, v in sorted(features.items()) if k.startswith("log:")), LOG_CAP)
    score += features.get("version:worse", 0.0) + features.get("version:unseen", 0.0)
    if "version:no_worse" not in features:  # a new version that behaves like the old does not count
        score += min(sum(v for k, v in sorted(features.items()) if k.startswith("change:")), CHANGE_CAP)
    score += min(sum(v for k, v in sorted(features.items()) if k.startswith("kube:") and k != "kube:broken"), KUBE_CAP)
    score += features.get("kube:broken", 0.0)
    # Fault mechanisms, weighed by how clearly they stand out in this incident. One the component's own
    # metrics also show (capacity used is a metric shift too) is a floor under its score; one they
    # cannot show (time lost on the way in, errors of its own making) adds to it.
    mech = {k: v for k, v in features.items() if k.startswith("mech:")}
    shown = max((v for k, v in mech.items() if k.startswith(SHOWN_IN_METRICS)), default=0.0)
    unseen = max((v for k, v in mech.items() if not k.startswith(SHOWN_IN_METRICS)), default=0.0)
    return max(score, shown) + unseen


#: Mechanisms whose evidence is a shift of the component's own metrics, already in its score.
SHOWN_IN_METRICS = ("mech:capacity:",)


#: What a component keeps of its own score when a dependency of it is out of service.
OUT_OF_SERVICE_EXPLAINS = 0.25


def unown_errors(features: Mapping[str, dict[str, float]], graph: list[Edge], out_of_service: set[str]) -> None:
    """A caller of an out-of-service dependency logs the failed calls as errors of its own: they are
    the dependency's doing, so the ``mech:own_errors`` mechanism does not stand for it (in place)."""
    if not on("out_of_service") or not out_of_service:
        return
    for component, found in features.items():
        if _behind_out_of_service(component, graph, out_of_service):
            found.pop("mech:own_errors", None)


def explain_by_out_of_service(
    own: Mapping[str, float], graph: list[Edge], out_of_service: set[str]
) -> dict[str, float]:
    """A caller whose dependency (or a dependency's dependency) is out of service, its object broken
    (no ready pods, pods refused, a node down), logs and fails because of it: its own score is the
    dependency's doing, and it keeps only a share of it. A component that is itself out of service
    keeps all of its own."""
    if not on("out_of_service") or not out_of_service:
        return dict(own)
    out = dict(own)
    for component, score in own.items():
        if _behind_out_of_service(component, graph, out_of_service):
            out[component] = score * OUT_OF_SERVICE_EXPLAINS
    return out


def _behind_out_of_service(component: str, graph: list[Edge], out_of_service: set[str]) -> bool:
    """Whether the component, not itself out of service, depends (directly or further down) on one that is."""
    return component not in out_of_service and bool(descendants(graph, (component,)) & out_of_service)


# ---------------------------------------------------------------- along the call graph

#: How much of a caller's anomaly an anomalous callee explains away.
EXPLAIN_AWAY = 0.6
#: How much of a caller's failures a dependency that only slowed down explains (timeouts).
SLOW_EXPLAINS_FAILING = 0.5
#: A component slow on its own (self time up) keeps this share of what its callees would explain.
SELF_SLOW_EXPLAINED = 0.3
#: A callee whose anomaly explains its callers' gains this share of the largest of theirs.
EXPLAINS_CALLERS = 0.2
#: A component reached only through components that show nothing (or not reached) keeps this share.
OFF_PATH = 0.5


def symptoms(features: Mapping[str, float]) -> set[str]:
    return {k for k in features if k.startswith("signal:") and not k.startswith(TRAFFIC)}


def fronted(graph: list[Edge], features: Mapping[str, Mapping[str, float]], traced: set[str]) -> list[Edge]:
    """Edges the graph cannot show: an uninstrumented leaf (a load balancer, a remote endpoint, known
    only from its callers' side) may front a sibling its caller also reaches directly.

    A leaf with no spans of its own has unknown callees, while an instrumented sibling's callees are
    known and do not include the leaf. So when both show the same symptom, the sibling's anomaly can
    explain the leaf's (the leaf may sit in front of it) and not the other way round: the leaf is
    given the sibling as a possible callee, and explaining-away does the rest."""
    if not on("mirrors"):
        return []
    below = callees_of(graph)
    out = []
    for caller in sorted(below):
        group = below[caller]
        for leaf in sorted(group):
            if below.get(leaf) or leaf in traced or leaf not in features:
                continue
            shown = symptoms(features[leaf])
            for sibling in sorted(group - {leaf}):
                if below.get(sibling) and sibling in features and shown & symptoms(features[sibling]):
                    out.append(Edge(caller=leaf, callee=sibling, source="declared"))
    return out


def propagate(
    own: Mapping[str, float], graph: list[Edge], features: Mapping[str, Mapping[str, float]]
) -> dict[str, float]:
    """Callers whose anomaly an anomalous callee explains give way; such callees gain a little.

    Failures are explained by failures: a dependency that fails accounts for its callers' errors,
    one that only slowed down accounts for them in part (timeouts), so a failing caller above a
    merely slow dependency keeps most of its own score."""
    callers = callers_of(graph)
    callees = callees_of(graph)  # once: gathered again for each component, it grew with their square
    below_sets = {n: reached(callees, (n,)) - {n} for n in set(own) | set(callers) | set(callees)}
    failing = {n: own_score({k: v for k, v in f.items() if k.startswith(FAILURES)}) for n, f in features.items()}

    def below(node: str, scores: Mapping[str, float]) -> float:
        return max((scores.get(d, 0.0) for d in below_sets.get(node, ())), default=0.0)

    out: dict[str, float] = {}
    for node in sorted(below_sets):
        mine = own.get(node, 0.0)
        if mine <= 0:
            out[node] = 0.0
            continue
        explained = min(below(node, own) / mine, 1.0)
        share = min(failing.get(node, 0.0) / mine, 1.0) if on("failures") else 0.0
        if share:
            by_failures = min(below(node, failing) / mine, 1.0)
            # Errors of its own making (not timeouts, not a callee's 5xx) a slow callee does not explain.
            slow_explains = 0.0 if "log:new_own_error" in features.get(node, {}) else SLOW_EXPLAINS_FAILING
            explained = (1 - share) * explained + share * max(by_failures, slow_explains * explained)
        if "trace:self_time_up" in features.get(node, {}):
            explained *= SELF_SLOW_EXPLAINED  # it is slow on its own, not only waiting
        if on("mechanisms") and placed_in(features.get(node, {})):
            explained *= SELF_SLOW_EXPLAINED  # a mechanism places the fault in it: not inherited from callees
        score = mine * (1 - EXPLAIN_AWAY * explained)
        up = max((own.get(c, 0.0) for c in callers.get(node, ())), default=0.0)
        score += EXPLAINS_CALLERS * min(up, mine)
        out[node] = score
    return out


def anomalous_reach(graph: list[Edge], roots: tuple[str, ...], own: Mapping[str, float]) -> set[str]:
    """Components the alert can be traced to through anomalous callers: a fault reaches the alerting
    service only through components it disturbs. A component with no telemetry is unknown, not
    quiet, so the path may pass through it; one that shows nothing blocks it."""
    below = callees_of(graph)
    seen = set(roots)
    frontier = sorted(roots)
    while frontier:
        node = frontier.pop()
        if node not in roots and own.get(node, 0.0) <= 0 and node in own:
            continue
        for callee in sorted(below.get(node, ())):
            if callee not in seen:
                seen.add(callee)
                frontier.append(callee)
    return seen


def reach_weight(component: str, *, reachable: bool, carried: set[str], placed: bool = False) -> float:
    """A component the alert reaches through anomalous components counts fully; others, OFF_PATH.

    A reachable component where a fault mechanism places the fault (``placed``) counts fully even when
    the components between it and the alert show nothing: callers often pass a failure on silently."""
    if not on("anomalous_path"):
        return 1.0 if reachable else OFF_PATH
    if reachable and placed and on("mechanisms"):
        return 1.0
    return 1.0 if reachable and component in carried else OFF_PATH


# ---------------------------------------------------------------- hypotheses

#: How many of triage's top components get hypotheses.
TOP_COMPONENTS = 6
#: A hypothesis' score: prior x (MATCH_FLOOR + how well the playbook fits) x (WEIGHT_FLOOR + the
#: component's triage score relative to the best). The floors keep a good fit on a lesser suspect,
#: or a loose fit on the top suspect, in the running.
MATCH_FLOOR, WEIGHT_FLOOR = 0.25, 0.2
#: A candidate scoring below this share of the round's best waits for the next beam (pruning).
BEAM_FLOOR = 0.2
#: How much a lesson lowers the kind it refuted, where its trigger shows again.
LESSON_PENALTY = 0.5
#: What a hypothesis that explains nothing the beam has not explained already is still worth.
REDUNDANT = 0.2
#: Untested hypotheses carry this share of their score into the suspects' order, as a tie-break.
HYPOTHESIS_TIEBREAK = 0.01


def hypothesis_score(prior: float, match: float, weight: float) -> float:
    return prior * (MATCH_FLOOR + match) * (WEIGHT_FLOOR + weight)


#: Where a fault mechanism proved itself on a component (a ``mech:`` feature), the kind it stands for
#: comes first: a hypothesis whose playbook names that mechanism counts MECHANISM_NAMED times, one of
#: another kind on the same component MECHANISM_OTHER times.
MECHANISM_NAMED, MECHANISM_OTHER = 2.0, 0.5


def mechanism_fit(*, has: bool, names: bool) -> float:
    """How a hypothesis' kind fits the mechanism its component shows (1 where none proved itself)."""
    if not has or not on("mechanisms"):
        return 1.0
    return MECHANISM_NAMED if names else MECHANISM_OTHER


def diverse(ranked: list[Hypothesis], weights: Mapping[str, float]) -> list[Hypothesis]:
    """Order for the beam by marginal explanation (like MMR): after the best hypothesis, prefer the
    one that accounts for the most evidence (weighted by its magnitude) the ones before it leave
    unexplained. A change and the mechanism it set off explain the same features; a rival
    explanation of the loudest symptom does not."""
    if not on("diversity"):
        return list(ranked)
    left = list(ranked)
    explained: set[str] = set()
    out: list[Hypothesis] = []
    while left:

        def worth(h: Hypothesis) -> float:
            if not h.explains:
                return h.score * REDUNDANT
            total = sum(weights.get(f, 1.0) for f in h.explains) or 1.0
            novel = sum(weights.get(f, 1.0) for f in sorted(set(h.explains) - explained)) / total
            return h.score * (REDUNDANT + (1 - REDUNDANT) * novel)

        best = max(left, key=lambda h: (worth(h), -left.index(h)))
        left.remove(best)
        out.append(best)
        explained.update(best.explains)
    return out


# ---------------------------------------------------------------- confirmation discipline

#: Kinds that say a component is slow (rather than failing, or saturated): calls into it took longer.
LATENCY_KINDS = frozenset({"network_degradation", "downstream_latency"})


def saturated_callers(component: str, graph: Sequence[Edge], features: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The callers of a component out of a capacity (mechanisms.CALLER_SIDE): it looks slow from there."""
    starved = tuple(f"mech:capacity:{c}" for c in CALLER_SIDE)
    return sorted(
        e.caller for e in graph if e.callee == component and any(f in features.get(e.caller, {}) for f in starved)
    )


def explained_latency(
    kind: str, component: str, graph: Sequence[Edge], features: Mapping[str, Mapping[str, float]]
) -> str | None:
    """Why a latency-type verdict on a component cannot stand, or None where it can.

    Slower calls into a component are its doing only where nothing its callers do explains them: a
    caller saturating its own CPU reads its answers late, one out of connections or threads waits inside
    its calls, and every callee looks slow from there. A component whose own span time grew, or with a
    mechanism of its own (``mech:``), keeps its verdict."""
    if kind not in LATENCY_KINDS or not on("mechanisms"):
        return None
    own = features.get(component, {})
    if "trace:self_time_up" in own or any(k.startswith("mech:") for k in own):
        return None  # its own time grew, or a mechanism of its own places the delay in it
    starved = saturated_callers(component, graph, features)
    if not starved:
        return None
    callers = ", ".join(starved)
    return f"the slower calls into {component} are explained by its caller(s) {callers} out of their capacity"


# ---------------------------------------------------------------- the suspects of the report

_STATUS_ORDER = {"confirmed": 0, "probable": 1, "inconclusive": 2, "unverified": 2, "refuted": 3}
#: How much a component's triage score counts when its hypotheses found support, were not tested,
#: or were all refuted.
OPEN, UNTESTED, RULED_OUT = 1.0, 0.8, 0.5


def suspects(
    proposed: Sequence[Hypothesis],
    results: Sequence[HypothesisResult],
    components: Sequence[tuple[str, float, list[str]]],
    graph: list[Edge],
) -> list[Suspect]:
    """One entry per component: confirmed first, then probable, then the rest by score.

    ``components`` are triage's (component, score, why). Among proven causes, a change comes first
    (it set the mechanism off), then a cause that explains another (a pool starved by slow queries;
    a callee whose failure its callers show), then the higher score. The rest are ranked by triage
    score, discounted when every hypothesis about the component was refuted, so an honest
    "inconclusive" still says where to look first."""
    verdicts = {r.hypothesis.id: r for r in results}
    top = max((score for _, score, _ in components), default=0.0) or 1.0
    norm = {c: score / top for c, score, _ in components}
    proven: list[tuple[Hypothesis, HypothesisResult]] = []
    rest: dict[str, Suspect] = {}
    # Components with an open hypothesis whose kind is what telling evidence of theirs shows (a mechanism
    # clear against the incident's other components, an object broken and saying why) come first.
    clear: set[str] = set()
    for h in proposed:
        r = verdicts.get(h.id)
        if r is not None and r.verdict.status in ("confirmed", "probable"):
            proven.append((h, r))
            continue
        status = r.verdict.status if r else "unverified"
        if status == "refuted":
            candidate = Suspect(
                component=h.component,
                kind="unknown",
                score=round(norm.get(h.component, 0) * RULED_OUT, 4),
                status="unverified",
                why=f"{h.kind} refuted: {r.verdict.reason if r else ''}",
            )
        else:
            # A kind whose mechanism proved itself in triage (a mech: feature it explains) is supported.
            named = any("/mech:" in f for f in h.explains) and on("mechanisms")
            weight = OPEN if named or (r is not None and r.verdict.supporting) else UNTESTED
            if r is not None and r.verdict.explained:
                weight = UNTESTED  # what explains it away is the better account of this component
            candidate = Suspect(
                component=h.component,
                kind=h.kind,
                score=round(norm.get(h.component, 0) * weight + h.score * HYPOTHESIS_TIEBREAK, 4),
                status=status,
                why=r.verdict.reason if r else "; ".join(h.why),
            )
            if on("clear_first") and any(f.split("/", 1)[-1].startswith(TELLING) for f in h.explains):
                clear.add(h.component)
        cur = rest.get(h.component)
        if cur is None or _rest_order(candidate) < _rest_order(cur):
            rest[h.component] = candidate
    for component, score, why in components:
        if score > 0 and component not in rest:
            rest[component] = Suspect(
                component=component,
                kind="unknown",
                score=round(norm[component] * UNTESTED, 4),
                status="unverified",
                why="; ".join(why[:3]) or "anomalous",
            )
    ordered = sorted(proven, key=lambda hr: _proven_order(hr, proven, graph))
    out: list[Suspect] = []
    for h, r in ordered:
        if all(s.component != h.component for s in out):
            out.append(
                Suspect(
                    component=h.component, kind=h.kind, score=h.score, status=r.verdict.status, why=r.verdict.reason
                )
            )
    out.extend(
        s
        for s in sorted(rest.values(), key=lambda s: (s.component not in clear, _rest_order(s)))
        if all(o.component != s.component for o in out)
    )
    return out


def where_the_alert_points(services: Sequence[str]) -> list[Suspect]:
    """When nothing the sources read sets a component apart, the alerting services are still where a
    human should look first: listed, unverified, with no kind and no score, and saying so."""
    return [
        Suspect(
            component=s,
            kind="unknown",
            score=0.0,
            status="unverified",
            why="nothing read set a component apart; the alert names this service",
        )
        for s in services
    ]


#: Evidence that proves itself in the incident at hand: a fault mechanism that stood out against the
#: incident's other components, or a Kubernetes object that is broken and says why.
TELLING = ("mech:", "kube:broken")


def _rest_order(s: Suspect) -> tuple[float, int, str]:
    return (-s.score, 0 if s.kind != "unknown" else 1, s.component)


def _proven_order(
    hr: tuple[Hypothesis, HypothesisResult], proven: list[tuple[Hypothesis, HypothesisResult]], graph: list[Edge]
) -> tuple[int, int, int, float, str]:
    h, r = hr
    status = _STATUS_ORDER[r.verdict.status]
    change_first = 0 if h.kind in CHANGE_KINDS else 1
    explains = sum(1 for o, _ in proven if o is not h and explains_hypothesis(h, o, graph))
    return (status, change_first, -explains, -h.score, h.id)


def explains_hypothesis(a: Hypothesis, b: Hypothesis, graph: list[Edge]) -> bool:
    """Whether a's fault accounts for b's: a consequence its playbook names, or a callee of b's component."""
    if b.kind in a.consequences and (
        a.component == b.component
        or a.component in descendants(graph, (b.component,))
        or _siblings(a.component, b.component, graph)  # a cache failing loads the database beside it
    ):
        return True
    return a.component != b.component and a.component in descendants(graph, (b.component,))


def rivals(winner: HypothesisResult, results: Sequence[HypothesisResult], graph: list[Edge]) -> list[ProvenRival]:
    """How each other proven cause stands to the root cause (``winner``), in the order ``suspects``
    ranks proven causes: the root cause accounts for it, or it ranks below it and by what."""
    proven = [(r.hypothesis, r) for r in results if r.verdict.status in ("confirmed", "probable")]
    a = winner.hypothesis
    out = []
    for b, r in sorted(proven, key=lambda hr: _proven_order(hr, proven, graph)):
        if b.id == a.id:
            continue
        relation, why = _relation(a, winner, b, r, proven, graph)
        out.append(ProvenRival(component=b.component, kind=b.kind, status=r.verdict.status, relation=relation, why=why))
    return out


def _relation(
    a: Hypothesis,
    ra: HypothesisResult,
    b: Hypothesis,
    rb: HypothesisResult,
    proven: list[tuple[Hypothesis, HypothesisResult]],
    graph: list[Edge],
) -> tuple[Literal["caused_by_root_cause", "ranked_below"], str]:
    """Why ``a`` (the root cause) stands above ``b``, in the terms of ``_proven_order``."""
    if explains_hypothesis(a, b, graph) and not explains_hypothesis(b, a, graph):
        if a.component == b.component:
            return "caused_by_root_cause", f"{a.kind} sets off {b.kind} on the same component (its playbook says so)"
        if a.component in descendants(graph, (b.component,)):
            return "caused_by_root_cause", (
                f"{b.component} calls {a.component}: {a.component}'s {a.kind} is what {b.component} shows"
            )
        return "caused_by_root_cause", f"{a.component} sits beside {b.component}, and {a.kind} sets off {b.kind}"
    if ra.verdict.status != rb.verdict.status:
        return "ranked_below", f"the root cause is {ra.verdict.status}; this one only {rb.verdict.status}"
    if a.kind in CHANGE_KINDS and b.kind not in CHANGE_KINDS:
        return "ranked_below", f"both proven; a change ({a.kind}) comes first: it is what moved"
    ea = sum(1 for o, _ in proven if o is not a and explains_hypothesis(a, o, graph))
    eb = sum(1 for o, _ in proven if o is not b and explains_hypothesis(b, o, graph))
    if ea != eb:
        return "ranked_below", (
            f"both proven; the root cause accounts for {ea} of the other proven causes, this one for {eb}"
        )
    return "ranked_below", (
        f"both proven; the evidence favours the root cause: hypothesis score {a.score:.3f} against {b.score:.3f} "
        "(prior x fit x triage)"
    )


def _siblings(a: str, b: str, graph: list[Edge]) -> bool:
    callers = callers_of(graph)
    return bool(callers.get(a, set()) & callers.get(b, set()))


# ---------------------------------------------------------------- concurrent changes

#: What the comparison of a change's new version with its old makes of the change: worse is the
#: change compared with itself; a new version that reports nothing cannot be cleared; one never
#: compared (no versions in the series) says nothing either way; one that behaves like the old one,
#: on the same minutes and traffic, is all but cleared.
VERSION_EVIDENCE: dict[str, float] = {"worse": 1.0, "unseen": 0.6, "unknown": 0.35, "no_worse": 0.05}
#: A change whose last move (its start, or a step) landed this many minutes before onset or less is
#: just before it: full weight. Older, its weight halves every CHANGE_HALF_LIFE_MIN more minutes.
JUST_BEFORE_MIN, CHANGE_HALF_LIFE_MIN = 10.0, 20.0
#: A change that moved only after onset did not set the incident off (it may have made it worse).
AFTER_ONSET = 0.1
#: A change to a service the alerting service cannot reach along the call graph keeps this share.
UNREACHABLE_CHANGE = 0.3
#: How much the changed service's own anomaly (its triage score, against the top one) adds to its
#: change's score, as a share: a change to a service that shows nothing explains less.
CHANGE_ANOMALY_SHARE = 0.5
#: A change whose hypothesis was proven gains this; one whose every hypothesis was refuted keeps
#: RULED_OUT of its score (as suspects do).
PROVEN_CHANGE = 10.0


def change_timing(minutes_before: float | None) -> float:
    """How much the timing of a change's last move before onset says it set the incident off."""
    if minutes_before is None:
        return AFTER_ONSET
    if minutes_before <= JUST_BEFORE_MIN:
        return 1.0
    return 0.5 ** ((minutes_before - JUST_BEFORE_MIN) / CHANGE_HALF_LIFE_MIN)


def change_score(verdict: str, minutes_before: float | None, *, reachable: bool, anomaly: float) -> float:
    """A change's score: its new version's comparison x the timing of its steps x whether the alert
    reaches it x (1 + a share of the changed service's own anomaly, 0..1)."""
    reach = 1.0 if reachable else UNREACHABLE_CHANGE
    return (
        VERSION_EVIDENCE.get(verdict, VERSION_EVIDENCE["unknown"])
        * change_timing(minutes_before)
        * reach
        * (1 + CHANGE_ANOMALY_SHARE * min(max(anomaly, 0.0), 1.0))
    )


#: Features that are a component's changes and what their comparison said, not its own anomaly.
CHANGE_FEATURES = ("change:", "version:")


def anomaly(features: Mapping[str, Mapping[str, float]], called: set[str]) -> dict[str, float]:
    """How anomalous each component is on everything but its changes, against the most anomalous (0..1)."""
    bare = {
        c: own_score({k: v for k, v in f.items() if not k.startswith(CHANGE_FEATURES)}, called=c in called)
        for c, f in features.items()
    }
    top = max(bare.values(), default=0.0) or 1.0
    return {c: v / top for c, v in bare.items()}


def order_changes(changes: Sequence[ChangeSuspect], results: Sequence[HypothesisResult]) -> list[ChangeSuspect]:
    """The changes after verification: a change whose service's change hypothesis was proven first,
    one whose change hypotheses were all refuted discounted, the rest by score (then the most recent)."""
    status: dict[str, str] = {}
    for r in results:
        if r.hypothesis.kind not in CHANGE_KINDS:
            continue
        now = status.get(r.hypothesis.component)
        if now is None or _STATUS_ORDER[r.verdict.status] < _STATUS_ORDER[now]:
            status[r.hypothesis.component] = r.verdict.status
    out = []
    for c in changes:
        verdict = status.get(c.service)
        factor = PROVEN_CHANGE if verdict in ("confirmed", "probable") else RULED_OUT if verdict == "refuted" else 1.0
        out.append(c.model_copy(update={"score": round(c.score * factor, 4), "status": verdict or "unverified"}))
    return sorted(out, key=lambda c: (-c.score, c.minutes_before_onset or 0.0, c.id))


# ---------------------------------------------------------------- confidence

#: A confirmed verdict starts at CONFIRMED_BASE and gains CONFIRMED_PER_KIND per kind of source
#: behind it, up to CONFIRMED_MAX; a probable verdict (one kind of source only) is PROBABLE.
CONFIRMED_BASE, CONFIRMED_PER_KIND, CONFIRMED_MAX, PROBABLE = 0.5, 0.15, 0.95, 0.5


def confidence(status: str, source_kinds: int) -> float:
    if status == "confirmed":
        return min(CONFIRMED_BASE + CONFIRMED_PER_KIND * source_kinds, CONFIRMED_MAX)
    return PROBABLE if status == "probable" else 0.0
