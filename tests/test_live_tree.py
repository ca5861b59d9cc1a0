"""The live hypothesis tree, driven by the events a recorded investigation emits: triage, the k
proposals with their scores, the beams, each hypothesis's calls as they run, verdicts, backtracking
and what lessons held back. The report keeps the same tree."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from rich.console import Console

from opsagent.cli.live import LiveTree
from opsagent.lessons import finalised
from opsagent.loop import Beam, Concluded, Event, Proposed, Started, StepTaken, Triaged
from opsagent.models import Report
from opsagent.pipeline import investigate_fixture
from tests.conftest import INCIDENTS, ORDER_INCIDENT


def _recorded(path: Path, **kwargs: object) -> tuple[Report, list[Event]]:
    events: list[Event] = []
    report, _ = asyncio.run(investigate_fixture(path, listener=events.append, **kwargs))  # type: ignore[arg-type]
    return report, events


def _frame(view: LiveTree) -> str:
    console = Console(width=200, record=True, file=io.StringIO())  # wide: one line per node
    console.print(view.renderable())
    return console.export_text()


def _drive(events: list[Event]) -> tuple[LiveTree, list[tuple[Event, str]]]:
    """Feed the events one by one, keeping the frame drawn after each."""
    view = LiveTree(Console(file=io.StringIO()), title="investigating", clock=lambda: 0.0)
    frames = []
    for event in events:
        view(event)
        frames.append((event, _frame(view)))
    return view, frames


def test_the_tree_grows_from_triage_to_verdicts_as_the_investigation_reports() -> None:
    report, events = _recorded(ORDER_INCIDENT)
    view = LiveTree(Console(file=io.StringIO()), title="investigating", clock=lambda: 0.0)
    assert "triage: reading every source…" in _frame(view)  # nothing is empty while triage runs
    view, frames = _drive(events)
    kinds = [type(e) for e, _ in frames]
    assert kinds.index(Triaged) < kinds.index(Proposed) < kinds.index(Beam) < kinds.index(Started)
    proposed_at = kinds.index(Proposed)
    proposals = frames[proposed_at][1]
    assert "round 1 · 5 proposed" in proposals and "not verified (5)" in proposals
    for h in events[proposed_at].hypotheses:  # type: ignore[union-attr]
        assert f"{h.kind} on {h.component} · score {h.score:.3f}" in proposals
    first_step = next(frame for e, frame in frames if isinstance(e, StepTaken))
    assert "▶" in first_step and "verifying, 1 step(s)" in first_step and "1. " in first_step
    refuted = next(frame for e, frame in frames if isinstance(e, Concluded) and e.verdict.status == "refuted")
    assert "✗ db_pool_exhaustion on order-service" in refuted and "db_connections_used peaked at 32/200" in refuted
    last = frames[-1][1]
    assert "✓ config_change on order-service" in last and "beam 1" in last
    assert view.recorder.tree() == report.search  # the report keeps the tree the engineer watched


def test_backtracking_shows_as_later_beams_after_refutations() -> None:
    report, events = _recorded(INCIDENTS / "partner-gateway-cert-expired")
    _, frames = _drive(events)
    last = frames[-1][1]
    assert "beam 2 · backtracking: nothing before it was proven" in last
    assert report.search is not None and max(n.beam or 0 for n in report.search.nodes()) >= 2
    assert any(n.status == "refuted" and n.beam == 1 for n in report.search.nodes())
    confirmed = next(n for n in report.search.nodes() if n.status == "confirmed")
    assert confirmed.beam is not None and confirmed.beam > 1  # the cause was found by backtracking
    assert f"✓ {confirmed.kind} on {confirmed.component}" in last


def test_what_a_lesson_held_back_shows_under_the_hypothesis_it_lowered() -> None:
    first, _ = _recorded(ORDER_INCIDENT)
    lessons = [finalised(le) for le in first.lessons]
    _, events = _recorded(ORDER_INCIDENT, lessons=lessons)
    _, frames = _drive(events)
    last = frames[-1][1]
    lesson = next(le for le in lessons if le.refuted_kind == "db_pool_exhaustion")
    assert f"lessons recalled: {lesson.id} against db_pool_exhaustion on order-service" in last
    held = last[last.index("not verified") :]
    assert "· db_pool_exhaustion on order-service" in held and f"lesson {lesson.id}: lowered" in held
