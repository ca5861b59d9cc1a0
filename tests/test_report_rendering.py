"""What the on-call engineer reads: the facts of a report survive in the terminal, in Markdown and
on the HTML page (ids, diffs, next steps, what lessons held back, links), printed as text, the
terminal within 80 columns."""

from __future__ import annotations

import asyncio
import html
import io
import re

import pytest
from rich.console import Console

from opsagent.lessons import finalised
from opsagent.loop import Budget
from opsagent.models import Report, Suspect
from opsagent.pipeline import investigate_fixture
from opsagent.report import render, to_markdown
from opsagent.service.pages import incident_page
from opsagent.store import IncidentRecord
from tests.conftest import ORDER_INCIDENT


def _flat(text: str) -> str:
    """Text with its wrapping undone: runs of whitespace (and tree guides) become one space."""
    return re.sub(r"[\s│├└─]+", " ", text)


def _terminal(report: Report, width: int = 80) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    render(report, console)  # a console that reads markup: the report must not give it any
    return console.export_text()


@pytest.fixture(scope="module")
def first() -> Report:
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT))
    return report


@pytest.fixture(scope="module")
def second(first: Report) -> Report:
    """The same incident again, with the lessons the first run taught (as `investigate` stores them)."""
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, lessons=[finalised(le) for le in first.lessons]))
    return report


def _facts(report: Report) -> list[str]:
    """Every fact the report holds that a reader acts on."""
    out = [report.incident.id, report.statement]
    out += [e.observation_id for e in report.evidence] + [e.statement for e in report.evidence]
    out += [t.what for t in report.timeline]
    out += [e.statement for r in report.refuted for e in r.verdict.refuting]
    out += [s.why for s in report.suspects[:8]] + list(report.next_steps)
    out += [u.lesson_id for u in report.lessons_used] + [c.value for u in report.lessons_used for c in u.refutation]
    out += [le.id for le in report.lessons]
    out += [link.url for link in report.links]
    out += [f"opsagent feedback {report.incident.id} --correct"]
    return [f for f in out if f]


def test_the_terminal_report_holds_every_fact_as_text_within_80_columns(first: Report) -> None:
    text = _terminal(first)
    flat = _flat(text)
    for fact in _facts(first):
        assert _flat(fact) in flat, fact
    assert "[chg-5c1e7a2]" in text  # a change id in brackets, not swallowed as markup
    assert "- core-pool-size: 32 | - max-pool-size: 32 | + core-pool-size: 4 | + max-pool-size: 4" in flat
    assert "onset 2026-03-17 14:03:00 UTC" in flat and "Timeline — 2026-03-17, UTC" in text
    assert "Roll back chg-5c1e7a2." in flat
    for line in text.splitlines():
        whole = line.strip()
        # a URL or a command is printed whole on its own line; everything else fits
        if not whole.startswith(("http://", "https://", "opsagent feedback")):
            assert len(line.rstrip()) <= 80, line


def test_the_markdown_holds_the_same_facts(first: Report) -> None:
    markdown = to_markdown(first)
    flat = _flat(markdown)
    for fact in _facts(first):
        assert _flat(fact) in flat, fact
    assert "onset: onset" not in markdown and "xinf" not in markdown
    assert "<details>" in markdown and "beam 1" in markdown  # the search tree, collapsed


def test_a_hypothesis_a_lesson_kept_out_is_listed_with_the_lesson_and_its_refutation(second: Report) -> None:
    use = next(u for u in second.lessons_used if u.held_back)
    assert use.held_back == ["order-service/db_pool_exhaustion"]
    assert not any(r.hypothesis.kind == "db_pool_exhaustion" for r in second.results)  # never verified here
    assert use.refutation and "db_connections_used peaked at 32/200" in use.refutation[0].value
    for text in (_flat(_terminal(second)), _flat(to_markdown(second))):
        ruled_out = text[text.index("Ruled out") :]
        assert "db_pool_exhaustion on order-service" in ruled_out
        assert f"lesson {use.lesson_id} lowered it" in ruled_out
        assert f"{use.refutation[0].observation_id}: {use.refutation[0].value}" in ruled_out


def test_markup_and_emoji_codes_in_data_print_as_they_are(first: Report) -> None:
    odd = Suspect(component="edge", kind="unknown", score=0.5, status="unverified", why="log:new:tls [bold]x[/bold]")
    report = first.model_copy(update={"suspects": [odd, *first.suspects]})
    text = _terminal(report)
    assert "log:new:tls [bold]x[/bold]" in text and "🆕" not in text


def test_the_terminal_report_of_an_inconclusive_investigation_says_where_to_look() -> None:
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, budget=Budget(max_steps=1)))
    assert report.status == "inconclusive"
    text = _flat(_terminal(report))
    for step in report.next_steps:
        assert _flat(step) in text
    assert "INCONCLUSIVE — needs a human" in text and "stopped early: budget exhausted: 1 steps" in text
    assert "(stopped: steps budget)" in text  # the tree says which budget stopped each hypothesis


def _page(report: Report) -> str:
    now = report.incident.onset
    record = IncidentRecord(
        id=report.incident.id,
        group_key="g",
        state="firing",
        investigation="done",
        service=report.incident.service,
        alertname="OrderServiceHighLatency",
        title=report.incident.title,
        receiver="opsagent",
        created_at=now,
        updated_at=now,
        resolved_at=None,
        notifications=1,
    )
    return incident_page(record, report, charts=[])


def test_the_report_page_holds_the_same_facts_and_the_tree_collapsed(second: Report) -> None:
    page = _page(second)
    text = _flat(html.unescape(re.sub(r"<[^>]+>", " ", page)))
    urls = {link.url for link in second.links}  # in href attributes, checked below
    for fact in _facts(second):
        assert fact in urls or _flat(fact) in text, fact
    assert "<details class='search'>" in page and "<details class='search' open" not in page  # collapsed
    use = next(u for u in second.lessons_used if u.held_back)
    ruled_out = text[text.index("Ruled out") :]
    assert f"lesson {use.lesson_id} lowered it" in ruled_out and use.refutation[0].value in ruled_out
    for link in second.links:
        assert f'href="{html.escape(link.url)}"' in page
    assert "<script" not in page
