from opsagent.judge import judge
from opsagent.models import Action, Evidence, MetricsData, Observation, SourceKind, TracesData, VersionsData


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
