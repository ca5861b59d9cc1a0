import pytest

from opsagent.fixtures import Edge
from opsagent.judge import explained_errors, judge
from opsagent.models import (
    Action,
    Evidence,
    Hypothesis,
    KubeFinding,
    KubernetesData,
    MetricsData,
    Observation,
    SourceKind,
    TracesData,
    VersionsData,
)


def _obs(oid: str, source: SourceKind) -> Observation:
    data = (
        MetricsData(stats=[])
        if source == SourceKind.metrics
        else TracesData(services=[], slowest_operations=[], error_spans={}, blocked_parents=[])
    )
    return Observation(id=oid, action=Action(tool=f"{source.value}.x"), source=source, data=data, text="", tokens=1)


OBS = {
    "m-1": _obs("m-1", SourceKind.metrics),
    "m-2": _obs("m-2", SourceKind.metrics),
    "t-1": _obs("t-1", SourceKind.traces),
}
ALL = {SourceKind.metrics, SourceKind.traces}


def ev(oid: str, source: SourceKind, stance: str = "supports", check: str = "c") -> Evidence:
    return Evidence(observation_id=oid, source=source, stance=stance, statement=f"{oid} says so", check=check)  # type: ignore[arg-type]


def test_confirmed_needs_two_kinds_of_source() -> None:
    two_metrics = [ev("m-1", SourceKind.metrics, check="a"), ev("m-2", SourceKind.metrics, check="b")]
    assert judge(two_metrics, OBS, available=ALL).status == "inconclusive"
    mixed = [ev("m-1", SourceKind.metrics), ev("t-1", SourceKind.traces)]
    assert judge(mixed, OBS, available=ALL).status == "confirmed"


def test_cited_ids_must_exist_and_match_their_source() -> None:
    invented = [ev("m-1", SourceKind.metrics), ev("t-404", SourceKind.traces)]
    assert judge(invented, OBS, available=ALL).status == "inconclusive"
    mislabelled = [ev("m-1", SourceKind.metrics), ev("m-2", SourceKind.traces)]
    assert judge(mislabelled, OBS, available=ALL).status == "inconclusive"


def test_one_refuting_observation_refutes() -> None:
    items = [ev("m-1", SourceKind.metrics), ev("t-1", SourceKind.traces), ev("m-2", SourceKind.metrics, "refutes")]
    verdict = judge(items, OBS, available=ALL)
    assert verdict.status == "refuted" and verdict.refuting[0].observation_id == "m-2"


def test_metrics_only_shop_earns_probable_never_confirmed() -> None:
    two_metrics = [ev("m-1", SourceKind.metrics, check="a"), ev("m-2", SourceKind.metrics, check="b")]
    assert judge(two_metrics, OBS, available={SourceKind.metrics}).status == "probable"


def test_repeated_evidence_counts_once() -> None:
    same = [ev("m-1", SourceKind.metrics), ev("m-1", SourceKind.metrics)]
    assert judge(same, OBS, available={SourceKind.metrics}).status == "inconclusive"


def _versions(oid: str) -> Observation:
    data = VersionsData(service="adservice", verdict="worse", reason="v2 fails")
    return Observation(
        id=oid, action=Action(tool="metrics.versions"), source=SourceKind.versions, data=data, text="", tokens=1
    )


def test_the_version_comparison_is_its_own_kind_of_evidence_beside_metrics() -> None:
    # A metrics-only shop: the canary comparison (same minutes, same traffic, two versions) and a
    # before/after shift of the service's metrics are two kinds of evidence.
    seen = {**OBS, "v-1": _versions("v-1")}
    both = [ev("v-1", SourceKind.versions), ev("m-1", SourceKind.metrics)]
    assert judge(both, seen, available={SourceKind.metrics}).status == "confirmed"
    # ...but the comparison does not make a one-source environment a two-source one
    two_metrics = [ev("m-1", SourceKind.metrics, check="a"), ev("m-2", SourceKind.metrics, check="b")]
    assert judge(two_metrics, seen, available={SourceKind.metrics, SourceKind.versions}).status == "probable"
    # and a comparison cited as metrics is cited under the wrong kind
    assert judge([ev("v-1", SourceKind.metrics), ev("t-1", SourceKind.traces)], seen, available=ALL).status == (
        "inconclusive"
    )


def _cluster(oid: str, *findings: KubeFinding) -> Observation:
    data = KubernetesData(service=None, findings=list(findings))
    return Observation(
        id=oid, action=Action(tool="kubernetes.pods"), source=SourceKind.kubernetes, data=data, text="", tokens=1
    )


def _finding(component: str, kind: str, *, direct: bool) -> KubeFinding:
    return KubeFinding(
        component=component,
        component_type="workload",
        object=f"Deployment/shop/{component}",
        sign="unschedulable",
        kind=kind,
        why=f"{component} Pending: 0/3 nodes are available: 3 Insufficient cpu",
        field="status.conditions[PodScheduled]",
        direct=direct,
    )


def _hypothesis(component: str, kind: str) -> Hypothesis:
    return Hypothesis(
        id=f"{kind}@{component}",
        component=component,
        kind=kind,
        statement="",
        confirm_if=[],
        refute_if=[],
        prior=0.3,
        score=0.3,
    )


KUBE = {SourceKind.kubernetes, SourceKind.logs, SourceKind.changes}


def test_an_object_that_names_the_fault_on_the_component_confirms_it_without_a_second_source() -> None:
    seen = {"k-1": _cluster("k-1", _finding("cart", "scheduling_failure", direct=True))}
    one = [ev("k-1", SourceKind.kubernetes)]
    verdict = judge(one, seen, available=KUBE, hypothesis=_hypothesis("cart", "scheduling_failure"))
    assert verdict.status == "confirmed"
    assert "Deployment/shop/cart status.conditions[PodScheduled]" in verdict.reason
    # the rule without the hypothesis it is evidence for: one kind of source, as before
    assert judge(one, seen, available=KUBE).status == "inconclusive"


@pytest.mark.parametrize(
    ("finding", "hypothesis"),
    [
        # the object names another kind than the hypothesis: it does not prove this one
        (_finding("cart", "scheduling_failure", direct=True), _hypothesis("cart", "code_exception")),
        # another component's object
        (_finding("cart", "scheduling_failure", direct=True), _hypothesis("web", "scheduling_failure")),
        # a finding read from logs or a symptom other causes give too is not the object's own word
        (_finding("cart", "scheduling_failure", direct=False), _hypothesis("cart", "scheduling_failure")),
    ],
)
def test_object_evidence_must_name_the_hypothesis_kind_on_its_own_component(
    finding: KubeFinding, hypothesis: Hypothesis
) -> None:
    seen = {"k-1": _cluster("k-1", finding)}
    assert judge([ev("k-1", SourceKind.kubernetes)], seen, available=KUBE, hypothesis=hypothesis).status == (
        "inconclusive"
    )


def test_a_refutation_outweighs_object_evidence() -> None:
    seen = {
        "k-1": _cluster("k-1", _finding("cart", "scheduling_failure", direct=True)),
        "k-2": _cluster("k-2"),
    }
    items = [ev("k-1", SourceKind.kubernetes), ev("k-2", SourceKind.kubernetes, "refutes", check="pending")]
    hypothesis = _hypothesis("cart", "scheduling_failure")
    assert judge(items, seen, available=KUBE, hypothesis=hypothesis).status == "refuted"


DELAYED = {"pay": {"mech:calls_in": 3.0, "mech:own_errors": 2.0}, "inside-pay": {"mech:own_errors": 2.0}}
CALLS = [Edge(caller="inside-pay", callee="pay"), Edge(caller="web", callee="inside-pay")]


def test_errors_a_network_delay_explains_do_not_prove_a_code_exception() -> None:
    # the delayed component's own errors, and its caller's, are what the delay does
    assert explained_errors("code_exception", "pay", CALLS, DELAYED) is not None
    assert explained_errors("code_exception", "inside-pay", CALLS, DELAYED) is not None
    # two hops up the delay is not what its errors run into; and other kinds are not this rule's
    assert explained_errors("code_exception", "web", CALLS, DELAYED) is None
    assert explained_errors("network_degradation", "pay", CALLS, DELAYED) is None
    # with no delay shown, new exceptions stand for a fault in the code
    assert explained_errors("code_exception", "pay", CALLS, {"pay": {"mech:own_errors": 2.0}}) is None
