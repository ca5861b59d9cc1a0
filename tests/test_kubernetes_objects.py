"""Broken Kubernetes objects as evidence, end to end on a recording written for it
(tests/data/kube/quota-incident): the entry service logs the calls its dependency cannot answer,
the dependency's pods are refused by the namespace's quota. The answer is the namespace, and the
entry service is explained away by its dependency being out of service."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from opsagent import ranking
from opsagent.fixtures import Edge
from opsagent.models import KubernetesData
from opsagent.pipeline import investigate_fixture
from opsagent.plan import load_default_playbooks

FIXTURE = Path(__file__).parent / "data" / "kube" / "quota-incident"
PLAYBOOKS = load_default_playbooks()


def test_the_namespace_whose_quota_refuses_the_pods_is_the_first_suspect() -> None:
    report, truth = asyncio.run(investigate_fixture(FIXTURE, playbooks=PLAYBOOKS))
    assert truth is not None and truth.target == "shop"
    first = report.suspects[0]
    assert (first.component, first.kind) == ("shop", "scheduling_failure")
    names = [s.component for s in report.suspects]
    assert "web" in names and names.index("web") > names.index("shop")


def test_the_cluster_read_names_the_broken_object_and_the_field_that_shows_it() -> None:
    report, _ = asyncio.run(investigate_fixture(FIXTURE, playbooks=PLAYBOOKS))
    reads = [o.data for o in report.observations if isinstance(o.data, KubernetesData) and o.data.findings]
    assert reads
    (finding,) = reads[0].findings
    assert (finding.object, finding.component_type, finding.field) == (
        "Namespace/shop",
        "namespace",
        "events[FailedCreate].message",
    )
    assert finding.affects == ["cart"]


def test_without_explaining_away_the_entry_service_outranks_the_namespace() -> None:
    """The control: the same recording with the rules off puts web, which only reports cart's absence,
    above what broke (explaining away, and the broken object's telling evidence ranking first)."""
    with ranking.without("out_of_service", "clear_first"):
        report, _ = asyncio.run(investigate_fixture(FIXTURE, playbooks=PLAYBOOKS))
    # triage's order: the report's suspects put the namespace first anyway, its verdict confirmed on
    # the quota's refusal (the judge reads the object, not the ranking)
    assert report.search is not None
    names = [c.component for c in report.search.components]
    assert names.index("web") < names.index("shop")
    with_rules, _ = asyncio.run(investigate_fixture(FIXTURE, playbooks=PLAYBOOKS))
    assert with_rules.search is not None
    ranked = [c.component for c in with_rules.search.components]
    assert ranked.index("shop") < ranked.index("web")


def test_a_caller_of_an_out_of_service_dependency_keeps_a_share_of_its_own_score() -> None:
    graph = [Edge(caller="web", callee="api", source="declared"), Edge(caller="api", callee="cart", source="declared")]
    own = {"web": 4.0, "api": 2.0, "cart": 1.0, "other": 3.0}
    kept = ranking.explain_by_out_of_service(own, graph, {"cart"})
    share = ranking.OUT_OF_SERVICE_EXPLAINS
    assert kept == {"web": 4.0 * share, "api": 2.0 * share, "cart": 1.0, "other": 3.0}
    assert ranking.explain_by_out_of_service(own, graph, set()) == own


SELECTOR = Path(__file__).parent / "data" / "kube" / "selector-incident"


def test_a_service_whose_selector_matches_no_pod_outranks_the_caller_that_reports_it() -> None:
    """cart's pods run and are ready; its Service selects a label none carries, so web's calls reach
    nobody. The Service object is named, with its field, and web (which only logs the refusals) is
    explained away."""
    report, truth = asyncio.run(investigate_fixture(SELECTOR, playbooks=PLAYBOOKS))
    assert truth is not None
    first = report.suspects[0]
    assert (first.component, first.kind) == ("cart", "config_change")
    names = [s.component for s in report.suspects]
    assert "web" not in names or names.index("web") > 0
    reads = [o.data for o in report.observations if isinstance(o.data, KubernetesData) and o.data.findings]
    (finding,) = reads[0].findings
    assert (finding.object, finding.component_type, finding.sign, finding.field) == (
        "Service/shop/cart",
        "service",
        "selector_matches_nothing",
        "spec.selector",
    )


DNS_EXIT = Path(__file__).parent / "data" / "kube" / "dns-exit-incident"
UNREACHABLE = Path(__file__).parent / "data" / "kube" / "unreachable-incident"
UNROUTED = Path(__file__).parent / "data" / "kube" / "unrouted-incident"


@pytest.mark.parametrize("strategy", ["hybrid", "react"])
def test_every_strategy_names_the_kind_the_broken_object_names(strategy: str) -> None:
    """orders crash-loops and its last lines say orders-db does not resolve: the finding points to a
    DNS fault. react, which chases one signal at a time, reads the finding whole (broken, how, and
    the kind it points to), so it names the DNS fault as hybrid does, not a bare crash loop."""
    report, _ = asyncio.run(investigate_fixture(DNS_EXIT, playbooks=PLAYBOOKS, strategy_name=strategy))
    first = report.suspects[0]
    assert (first.component, first.kind) == ("orders", "dns_failure")


@pytest.mark.parametrize("strategy", ["hybrid", "react"])
def test_a_service_its_callers_cannot_reach_while_its_pods_are_ready_outranks_the_callers(strategy: str) -> None:
    """No Service object in the recording; cart's pod is ready; web's log says it cannot connect to
    cart on the port cart serves. cart (its Service) is named, and web, which reports it, is not first."""
    report, _ = asyncio.run(investigate_fixture(UNREACHABLE, playbooks=PLAYBOOKS, strategy_name=strategy))
    first = report.suspects[0]
    assert (first.component, first.kind) == ("cart", "config_change")
    reads = [o.data for o in report.observations if isinstance(o.data, KubernetesData) and o.data.findings]
    (finding,) = reads[0].findings
    assert (finding.object, finding.sign) == ("Service/shop/cart", "unreachable_while_ready")
    assert "web cannot connect to cart:6379" in finding.why


@pytest.mark.parametrize("strategy", ["hybrid", "react"])
def test_a_component_whose_requests_its_entry_answers_not_found_outranks_the_entry(strategy: str) -> None:
    """Every pod is ready; since 10:05 web's access log answers every request for /api/v1/cart 404
    while its search path answers 200. cart (the route in front of it) is named, not web."""
    report, _ = asyncio.run(investigate_fixture(UNROUTED, playbooks=PLAYBOOKS, strategy_name=strategy))
    first = report.suspects[0]
    assert (first.component, first.kind) == ("cart", "config_change")
    reads = [o.data for o in report.observations if isinstance(o.data, KubernetesData) and o.data.findings]
    (finding,) = reads[0].findings
    assert (finding.object, finding.sign, finding.affects) == ("Route/api/v1/cart", "route_not_found", ["cart"])
    assert "web answered the last 60 requests to /api/v1/cart (for cart) 404 Not Found" in finding.why


@pytest.mark.parametrize("strategy", ["hybrid", "react"])
def test_an_object_whose_field_names_the_fault_confirms_the_verdict(strategy: str) -> None:
    """The quota's refusal (the ReplicaSet's FailedCreate) and the selector no pod matches (the
    Service's spec) are the objects' own words: the judge confirms on them, though the cluster is the
    only source that shows the fault."""
    for fixture, expected in ((FIXTURE, ("shop", "scheduling_failure")), (SELECTOR, ("cart", "config_change"))):
        report, _ = asyncio.run(investigate_fixture(fixture, playbooks=PLAYBOOKS, strategy_name=strategy))
        assert report.status == "confirmed", fixture.name
        assert report.root_cause is not None
        assert (report.root_cause.component, report.root_cause.kind) == expected
        assert any(e.source == "kubernetes" for e in report.evidence)


def test_what_callers_say_of_a_component_does_not_confirm_on_its_own() -> None:
    """Callers that cannot connect to cart while its pod is ready name cart's Service, but that is read
    from their logs, not from an object's field: it ranks cart first, it does not confirm it."""
    report, _ = asyncio.run(investigate_fixture(UNREACHABLE, playbooks=PLAYBOOKS))
    assert report.suspects[0].component == "cart"
    assert report.status != "confirmed"
