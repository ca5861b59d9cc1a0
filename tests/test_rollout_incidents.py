"""Recorded release trains (fixtures/generate.py): two or three rollouts overlap pod by pod, one
release defective. The report names the defective change, its versions, the figures that compare
them and the step after which it began, suggests rolling it back, and ranks the clean rollouts (and a
change the alert cannot reach, or one long before onset) below it."""

from __future__ import annotations

import asyncio

import pytest

from opsagent.fixtures import Truth
from opsagent.models import Report, SourceKind, VersionsData
from opsagent.pipeline import investigate_fixture
from opsagent.plan import load_default_playbooks
from opsagent.scoreboard import Scoreboard, score
from tests.conftest import INCIDENTS

TRAINS = (
    "cart-rollout-beside-clean-search",
    "order-rollout-after-clean-inventory",
    "search-rollout-three-in-flight",
    "inventory-rollout-metrics-only",
    "recommendation-rollout-unseen",
)
PLAYBOOKS = load_default_playbooks()


@pytest.fixture(scope="module")
def replayed() -> dict[str, tuple[Report, Truth]]:
    out = {}
    for slug in TRAINS:
        report, truth = asyncio.run(investigate_fixture(INCIDENTS / slug, playbooks=PLAYBOOKS))
        assert truth is not None
        out[slug] = (report, truth)
    return out


def _changes(report: Report) -> dict[str, str]:
    return {c.id: c.verdict for c in report.changes}


def test_every_release_train_ranks_the_defective_change_first(replayed: dict[str, tuple[Report, Truth]]) -> None:
    board = Scoreboard(strategy="hybrid", scores=[score(slug, r, t) for slug, (r, t) in replayed.items()])
    assert board.change_at(1) == 1.0 and board.ac(1) == 1.0 and board.kind_accuracy == 1.0
    for slug, (report, truth) in replayed.items():
        assert len([c for c in report.changes if c.kind == "rollout"]) >= 2, slug
        assert set(report.changes[0].ids) & set(truth.change_ids), slug


def test_the_verdict_names_the_change_its_versions_figures_and_step(
    replayed: dict[str, tuple[Report, Truth]],
) -> None:
    report, _ = replayed["cart-rollout-beside-clean-search"]
    assert report.status == "confirmed"
    named = report.change
    assert named is not None and named.id == "roll-cart-630" and named.status == "confirmed"
    assert (named.from_version, named.to_version, named.verdict, named.step) == ("6.2.0", "6.3.0", "worse", 1)
    assert named.comparison is not None and named.comparison.meaning == "errors"
    assert named.comparison.new_median > 0.3 > 0.01 > named.comparison.old_median
    assert report.statement.startswith("cart-service 6.3.0 pods: http_request_error_ratio")
    assert (
        "6.2.0 pods" in report.statement and "since step 1 of its rollout at 14:04 [roll-cart-630]" in report.statement
    )
    assert report.next_steps[0] == "Roll back roll-cart-630 (cart-service 6.3.0 -> 6.2.0)."
    assert any("Pause roll-cart-630" in s for s in report.next_steps)  # still rolling out
    assert any("step 1 of rollout cart-service [roll-cart-630]" in e.what for e in report.timeline)
    # the version comparison is its own kind of evidence, beside the change record
    assert {e.source for e in report.evidence} >= {SourceKind.versions, SourceKind.changes}


def test_a_clean_rollout_beside_it_is_a_red_herring(replayed: dict[str, tuple[Report, Truth]]) -> None:
    report, _ = replayed["cart-rollout-beside-clean-search"]
    assert _changes(report)["roll-search-295"] == "no_worse"
    report, _ = replayed["order-rollout-after-clean-inventory"]
    # the clean one started a quarter of an hour earlier; the defective one after it
    inventory, order = (next(c for c in report.changes if c.id == i) for i in ("roll-inventory-230", "roll-order-3150"))
    assert inventory.started < order.started and inventory.verdict == "no_worse"
    assert report.change is not None and report.change.id == "roll-order-3150"
    assert report.change.comparison is not None and report.change.comparison.meaning == "latency"


def test_changes_the_alert_cannot_reach_or_long_before_onset_rank_low(
    replayed: dict[str, tuple[Report, Truth]],
) -> None:
    report, _ = replayed["search-rollout-three-in-flight"]
    by_id = {c.id: c for c in report.changes}
    assert not by_id["roll-frontend-5130"].reachable  # the frontend calls the alerting gateway, not the other way
    assert by_id["roll-frontend-5130"].score < by_id["roll-product-751"].score
    (old,) = [c for c in report.changes if c.kind == "deploy"]
    assert old.minutes_before_onset is not None and old.minutes_before_onset > 40
    assert old.score < by_id["roll-search-300"].score / 10


def test_a_feed_of_steps_and_pods_without_versions_in_the_series_still_compares(
    replayed: dict[str, tuple[Report, Truth]],
) -> None:
    report, truth = replayed["inventory-rollout-metrics-only"]
    assert report.status == "confirmed" and report.change is not None
    assert report.change.ids == truth.change_ids  # the start and its step records, one rollout
    compared = [o.data for o in report.observations if isinstance(o.data, VersionsData)]
    inventory = next(v for v in compared if v.service == "inventory-service")
    assert inventory.change_id == "roll-inventory-240-start" and inventory.verdict == "worse"
    assert inventory.new_pods and not inventory.notes  # every series placed by the feed's pods


def test_a_new_version_nobody_can_see_is_ranked_first_but_not_proven(
    replayed: dict[str, tuple[Report, Truth]],
) -> None:
    report, _ = replayed["recommendation-rollout-unseen"]
    assert report.status == "inconclusive" and report.change is None
    first = report.changes[0]
    assert (first.id, first.verdict) == ("roll-reco-380", "unseen")
    assert (report.suspects[0].component, report.suspects[0].kind) == ("recommendation-service", "deploy_regression")
    assert any(s.startswith("Changes to look at first: roll-reco-380") for s in report.next_steps)


def test_the_views_show_the_changes_in_flight_and_their_ids_as_text(
    replayed: dict[str, tuple[Report, Truth]],
) -> None:
    from rich.console import Console

    from opsagent.report import render, to_markdown

    report, _ = replayed["cart-rollout-beside-clean-search"]
    markdown = to_markdown(report)
    assert "## Changes in flight" in markdown
    assert "| 1 | roll-cart-630 | cart-service | 6.2.0 -> 6.3.0 | worse |" in markdown
    console = Console(record=True, width=200)
    render(report, console)
    shown = console.export_text()
    assert "Changes in flight" in shown and "[roll-cart-630]" in shown  # an id in brackets is not markup
    from tests.test_report_rendering import _page

    page = _page(report)
    assert "<h2>Changes in flight</h2>" in page
    assert "<td>roll-cart-630</td><td>cart-service</td><td>6.2.0 -&gt; 6.3.0</td><td>worse</td>" in page
