"""Generic localisation rules in triage, each on a small hand-made call graph."""

from __future__ import annotations

import time

from opsagent.fixtures import Edge
from opsagent.models import Evidence, Hypothesis, HypothesisResult, SourceKind, StopReason, Verdict
from opsagent.ranking import (
    anomalous_reach,
    fronted,
    own_score,
    propagate,
    suspects,
    weigh_by_specificity,
    without,
)


def _profiles(features: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {component: dict(found) for component, found in features.items()}


def _edges(*pairs: tuple[str, str]) -> list[Edge]:
    return [Edge(caller=a, callee=b) for a, b in pairs]


SLOW = {"signal:latency_p99:up": 3.0}


def test_the_requests_a_callee_receives_are_its_callers_doing() -> None:
    busy = {"signal:request_rate:up": 3.0, "signal:latency_p99:up": 1.0}
    assert own_score(busy, called=True) == own_score({"signal:latency_p99:up": 1.0})
    assert own_score(busy, called=False) > own_score(busy, called=True)  # an entry point's traffic is its own


def test_an_uninstrumented_leaf_may_front_a_sibling_with_the_same_symptom() -> None:
    graph = _edges(("front", "lb"), ("front", "search"), ("search", "db"), ("front", "quiet-leaf"))
    profiles = _profiles({"lb": SLOW, "search": SLOW, "db": {}, "quiet-leaf": {"signal:cpu_usage:up": 1.0}})
    assert fronted(graph, profiles, traced=set()) == _edges(("lb", "search"))
    assert fronted(graph, profiles, traced={"lb"}) == []  # spans of its own: its callees are known


def test_a_mirroring_leaf_gives_way_to_the_service_behind_it() -> None:
    graph = _edges(("front", "lb"), ("front", "search"), ("search", "db"))
    profiles = _profiles({"front": SLOW, "lb": SLOW, "search": SLOW, "db": {}})
    own = {"front": 2.0, "lb": 6.0, "search": 4.0, "db": 0.0}
    plain = propagate(own, graph, profiles)
    with_mirror = propagate(own, graph + fronted(graph, profiles, set()), profiles)
    assert plain["lb"] > plain["search"]
    assert with_mirror["search"] > with_mirror["lb"]


def test_failures_are_explained_by_failures() -> None:
    graph = _edges(("api", "dep"))
    failing_api = {"signal:availability:down": 3.0, "signal:latency_p99:up": 1.0}
    slow_dep = propagate({"api": 4.0, "dep": 4.0}, graph, _profiles({"api": failing_api, "dep": SLOW}))
    failing_dep = propagate(
        {"api": 4.0, "dep": 4.0}, graph, _profiles({"api": failing_api, "dep": {"signal:error_ratio:up": 3.0}})
    )
    assert slow_dep["api"] > failing_dep["api"]
    assert slow_dep["dep"] == failing_dep["dep"]


def test_explaining_away_over_thousands_of_components_takes_a_moment() -> None:
    # 4,000 call edges of 8,000 components: the callees are gathered once, not once per component
    # (12.6 s CPU when they were)
    graph = [Edge(caller=f"caller-{i}", callee=f"callee-{i}") for i in range(4000)]
    own = {name: 4.0 for e in graph for name in (e.caller, e.callee)}
    started = time.process_time()
    scores = propagate(own, graph, _profiles({name: SLOW for name in own}))
    assert time.process_time() - started < 1.0
    assert all(scores[e.callee] > scores[e.caller] for e in graph)  # each callee explains its caller


def test_a_fault_reaches_the_alert_only_through_disturbed_components() -> None:
    graph = _edges(("alerting", "quiet"), ("quiet", "culprit"), ("alerting", "dark"), ("dark", "other"))
    own = {"alerting": 2.0, "quiet": 0.0, "culprit": 4.0, "other": 3.0}  # "dark" has no telemetry at all
    reach = anomalous_reach(graph, ("alerting",), own)
    assert "culprit" not in reach
    assert {"quiet", "dark", "other"} <= reach


def test_a_shift_spreading_along_calls_is_one_place_scattered_shifts_are_weather() -> None:
    graph = _edges(("front", "mid"), ("mid", "db"), ("x", "y"))
    cascade = {c: {"signal:latency_p99:up": 2.0} for c in ("front", "mid", "db")}
    scattered = {c: {"signal:latency_p99:up": 2.0} for c in ("a", "b", "c", "d", "e", "f")}
    quiet = {c: {} for c in ("q1", "q2", "q3", "q4", "q5")}
    cascade.update(quiet)
    scattered.update(quiet)
    weigh_by_specificity(cascade, graph)
    weigh_by_specificity(scattered, graph)
    assert cascade["db"]["signal:latency_p99:up"] == 2.0  # one place: as telling as a single component
    assert scattered["a"]["signal:latency_p99:up"] < 1.0


def test_own_failures_weigh_more_than_how_fast_it_is() -> None:
    failing = {"signal:availability:down": 2.0}
    slow = {"signal:latency_p99:up": 2.0}
    assert own_score(failing) > own_score(slow)
    with without("failures_first"):
        assert own_score(failing) == own_score(slow)


def test_a_slow_callee_does_not_explain_errors_of_the_callers_own_making() -> None:
    graph = _edges(("api", "dep"))
    own_errors = {"log:new_error": 2.0, "log:new_own_error": 2.0}
    timeouts = {"log:new_error": 2.0, "log:new:timeout": 0.5}
    with_own = propagate({"api": 4.0, "dep": 4.0}, graph, {"api": own_errors, "dep": SLOW})
    with_timeouts = propagate({"api": 4.0, "dep": 4.0}, graph, {"api": timeouts, "dep": SLOW})
    assert with_own["api"] > 3.5 > with_timeouts["api"]


def test_an_open_cause_whose_mechanism_stood_out_ranks_before_one_with_more_but_less_telling_evidence() -> None:
    def open_(component: str, kind: str, explains: list[str]) -> HypothesisResult:
        h = Hypothesis(
            id=f"{kind}@{component}",
            component=component,
            kind=kind,
            statement="s",
            confirm_if=[],
            refute_if=[],
            prior=0.2,
            score=0.1,
            explains=explains,
        )
        seen = Evidence(observation_id="m-1", source=SourceKind.metrics, stance="supports", statement="x")
        verdict = Verdict(status="inconclusive", reason="no checks left", supporting=[seen])
        return HypothesisResult(hypothesis=h, steps=[], verdict=verdict, stop_reason=StopReason.no_checks_left)

    # The hog's CPU stood out against every other component (a mech: feature its hypothesis explains);
    # the callee shows more metric shifts, none of them a mechanism.
    hog = open_("hog", "cpu_saturation", ["hog/mech:capacity:cpu_usage", "hog/signal:cpu_usage:up"])
    callee = open_("callee", "network_degradation", ["callee/signal:latency_p99:up"])
    results = [callee, hog]
    components = [("callee", 7.7, []), ("hog", 4.6, [])]
    graph = _edges(("hog", "callee"))
    ranked = suspects([r.hypothesis for r in results], results, components, graph)
    assert [(s.component, s.kind) for s in ranked] == [("hog", "cpu_saturation"), ("callee", "network_degradation")]
    with without("clear_first"):
        ranked = suspects([r.hypothesis for r in results], results, components, graph)
        assert ranked[0].component == "callee"


def test_a_kind_the_incident_explains_away_comes_after_the_kind_that_explains_it() -> None:
    # The pay service's errors were proven, then explained away by the network delay on the calls into
    # it (pipeline.disciplined): its suspect kind is the delay, though the code fault scored higher.
    def result(kind: str, score: float, explains: list[str], **verdict: object) -> HypothesisResult:
        h = Hypothesis(
            id=f"{kind}@pay",
            component="pay",
            kind=kind,
            statement="s",
            confirm_if=[],
            refute_if=[],
            prior=0.2,
            score=score,
            explains=explains,
        )
        seen = Evidence(observation_id="l-1", source=SourceKind.logs, stance="supports", statement="x")
        v = Verdict(status="inconclusive", reason="r", supporting=[seen], **verdict)  # type: ignore[arg-type]
        return HypothesisResult(hypothesis=h, steps=[], verdict=v, stop_reason=StopReason.no_checks_left)

    code = result("code_exception", 0.5, ["pay/mech:own_errors"], explained=True)
    delay = result("network_degradation", 0.3, ["pay/mech:calls_in"])
    results = [code, delay]
    ranked = suspects([r.hypothesis for r in results], results, [("pay", 5.0, [])], _edges(("web", "pay")))
    assert (ranked[0].component, ranked[0].kind) == ("pay", "network_degradation")
    # Not explained away, the higher-scoring code fault names the component.
    plain = result("code_exception", 0.5, ["pay/mech:own_errors"])
    ranked = suspects([plain.hypothesis, delay.hypothesis], [plain, delay], [("pay", 5.0, [])], _edges(("web", "pay")))
    assert ranked[0].kind == "code_exception"
