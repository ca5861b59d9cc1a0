"""The report says what to do first: the verdict, its confidence, the one action and why sit in the
first lines of the terminal, Markdown and HTML views, before the evidence; where two causes are
proven it says how they relate; the suspects' printed scores say what their order is by; a run
that records no lesson does not list lessons as written."""

from __future__ import annotations

import asyncio
import html
import io
import re

import pytest
from rich.console import Console
from typer.testing import CliRunner

from opsagent.cli import app
from opsagent.loop import Budget
from opsagent.models import Report
from opsagent.pipeline import investigate_fixture
from opsagent.report import SUSPECT_ORDER, first_action, render, to_markdown
from opsagent.service.pages import incident_page
from opsagent.store import IncidentRecord
from tests.conftest import INCIDENTS, ORDER_INCIDENT

STRIPE = INCIDENTS / "stripe-latency-checkout"
LEDGER = INCIDENTS / "ledger-db-pool-exhaustion"


def _investigate(path: object, **kwargs: object) -> Report:
    report, _ = asyncio.run(investigate_fixture(path, **kwargs))  # type: ignore[arg-type]
    return report


@pytest.fixture(scope="module")
def reports() -> dict[str, Report]:
    return {
        "order": _investigate(ORDER_INCIDENT),
        "stripe": _investigate(STRIPE),
        "ledger": _investigate(LEDGER),
        "inconclusive": _investigate(ORDER_INCIDENT, budget=Budget(max_steps=1)),
    }


def _terminal(report: Report) -> list[str]:
    console = Console(width=80, record=True, file=io.StringIO())
    render(report, console)
    return [line.rstrip() for line in console.export_text().splitlines()]


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _page(report: Report) -> str:
    now = report.incident.onset
    record = IncidentRecord(
        id=report.incident.id,
        group_key="g",
        state="firing",
        investigation="done",
        service=report.incident.service,
        alertname="alert",
        title=report.incident.title,
        receiver="opsagent",
        created_at=now,
        updated_at=now,
        resolved_at=None,
        notifications=1,
    )
    return incident_page(record, report, charts=[])


def _page_text(page: str) -> str:
    return _flat(html.unescape(re.sub(r"<[^>]+>", " ", page)))


@pytest.mark.parametrize("name", ["order", "stripe", "ledger", "inconclusive"])
def test_every_view_opens_with_the_verdict_the_action_and_why(reports: dict[str, Report], name: str) -> None:
    report = reports[name]
    first = first_action(report)
    assert first is not None
    action, why = first
    assert action == report.next_steps[0]
    verdict = "INCONCLUSIVE — needs a human" if report.root_cause is None else f"(confidence {report.confidence:.2f})"

    lines = _terminal(report)
    top = _flat(" ".join(lines[:14]))  # a 80x24 terminal's first screen, the title and meta lines included
    assert verdict in top and f"Do first: {_flat(action)}" in top and f"why: {_flat(why)}" in top
    evidence_at = lines.index("Evidence") if "Evidence" in lines else len(lines)
    assert next(i for i, line in enumerate(lines) if line.startswith("Do first:")) < evidence_at

    markdown = to_markdown(report)
    head = _flat(markdown.split("\n## ", 2)[1])  # the headline's section: before any other
    assert f"**Do first:** {_flat(action)}" in _flat(markdown.split("## Evidence")[0])
    assert verdict in head or report.root_cause is None

    page = _page(report)
    panel = page[page.index("<div class='panel verdict'>") : page.index("<h2>")]  # above the fold
    assert f"Do first: {_flat(action)}" in _page_text(panel) and f"why: {_flat(why)}" in _page_text(panel)


def test_the_why_of_a_rollback_names_the_change_and_its_evidence(reports: dict[str, Report]) -> None:
    action, why = first_action(reports["order"]) or ("", "")
    assert action.startswith("Roll back chg-5c1e7a2")
    assert "config_change on order-service is confirmed by 2 observation(s) from changes, metrics" in why
    assert "chg-5c1e7a2 is the change that set it off" in why


def test_an_inconclusive_report_says_why_it_points_where_it_does(reports: dict[str, Report]) -> None:
    report = reports["inconclusive"]
    _, why = first_action(report) or ("", "")
    assert why.startswith("nothing was proven; ") and report.suspects[0].component in why


def test_two_confirmed_causes_say_how_they_relate(reports: dict[str, Report]) -> None:
    report = reports["stripe"]
    assert report.root_cause is not None and report.root_cause.component == "stripe-api"
    (rival,) = report.also_proven
    assert (rival.component, rival.kind, rival.relation) == (
        "payment-service",
        "thread_pool_exhaustion",
        "caused_by_root_cause",
    )
    assert "payment-service calls stripe-api" in rival.why
    line = "Also confirmed: thread_pool_exhaustion on payment-service, caused by the root cause"
    assert line in _flat(" ".join(_terminal(report)[:16]))
    assert line in _flat(to_markdown(report).split("## Evidence")[0])
    page = _page(report)
    assert line in _page_text(page[: page.index("<h2>")])


def test_a_mechanism_on_the_same_component_is_set_off_by_the_root_cause(reports: dict[str, Report]) -> None:
    (rival,) = reports["ledger"].also_proven
    assert (rival.kind, rival.relation) == ("thread_pool_exhaustion", "caused_by_root_cause")
    assert "db_pool_exhaustion sets off thread_pool_exhaustion on the same component" in rival.why


def test_the_headline_cause_is_not_listed_again_under_other_hypotheses(reports: dict[str, Report]) -> None:
    report = reports["ledger"]
    assert report.root_cause is not None
    again = f"{report.root_cause.kind} on {report.root_cause.component}"
    terminal = "\n".join(_terminal(report))
    markdown = to_markdown(report)
    page = _page_text(_page(report))
    for text in (terminal, markdown, page):
        assert "Other hypotheses" in text  # the thread pool, which the root cause set off, is listed
        others = text[text.index("Other hypotheses") :]
        others = others[: min(i for i in (others.find("Search"), len(others)) if i >= 0)]
        assert again not in others and "thread_pool_exhaustion on ledger-service" in others


def test_the_suspects_say_what_their_order_is_by(reports: dict[str, Report]) -> None:
    report = reports["stripe"]
    scores = [s.score for s in report.suspects]
    assert scores != sorted(scores, reverse=True)  # proven causes rank by verdict, not by the printed score
    rest = [s.score for s in report.suspects if s.status not in ("confirmed", "probable")]
    assert rest == sorted(rest, reverse=True)  # and the rest by score, as the caption says
    assert _flat(SUSPECT_ORDER) in _flat("\n".join(_terminal(report)))
    assert SUSPECT_ORDER in to_markdown(report)
    assert SUSPECT_ORDER in html.unescape(_page(report))


runner = CliRunner()


def test_no_lessons_prints_no_lessons_written() -> None:
    quiet = runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--no-live", "--no-lessons"])
    assert quiet.exit_code == 0 and "Do first: Roll back chg-5c1e7a2" in quiet.output
    assert "Lessons written" not in quiet.output
    assert "Lessons written" not in runner.invoke(app, ["demo"]).output
    stored = runner.invoke(app, ["investigate", str(ORDER_INCIDENT), "--no-live"])  # lessons on: recorded
    assert stored.exit_code == 0 and "Lessons written" in stored.output
