"""What the store keeps of an investigation, for every front end (``opsagent investigate`` and
``feedback``, the MCP server): the investigation and the lessons it teaches
(:func:`keep_investigation`), and the engineer's verdict on it (:func:`apply_feedback`): the
investigation records it, the lessons it used are counted as helpful or misleading, and a wrong
conclusion with a named root cause becomes a lesson. It writes to opsagent's own store, never to a
system.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pydantic import BaseModel, Field

from opsagent.lessons import (
    about_environment,
    from_feedback,
    learn_environment,
    misled_by,
    root_cause_parts,
    rule_check,
)
from opsagent.models import Action, Lesson, Report
from opsagent.store import Store


class Kept(BaseModel):
    """What keeping one investigation wrote."""

    lessons: int = Field(default=0, description="lessons the report taught, written")
    merged: int = Field(default=0, description="of those, merged into lessons already stored")
    not_learned: list[str] = Field(default_factory=list, description="why no lessons were written (rule checks)")


def keep_investigation(memory: Store, report: Report) -> Kept:
    """Record the investigation (``investigations``, ``feedback``), count the lessons it used, and
    write the lessons it teaches when its conclusion passes the rule checks."""
    issues = rule_check(report)
    # a conclusion that fails the rule checks is kept without the lessons it would have written
    memory.save_investigation(report if not issues else report.model_copy(update={"lessons": []}))
    memory.count_use([u.lesson_id for u in report.lessons_used])
    if issues:
        return Kept(not_learned=issues)
    merged = sum(memory.upsert_lesson(le)[1] for le in report.lessons)
    return Kept(lessons=len(report.lessons), merged=merged)


class FeedbackOutcome(BaseModel):
    """What recording one verdict did."""

    incident_id: str
    correct: bool
    root_cause: str | None = None
    misled: list[str] = Field(default_factory=list, description="lessons counted as misleading")
    lesson: Lesson | None = Field(default=None, description="the lesson the correction became")
    no_lesson: str | None = Field(default=None, description="why a correction became no lesson")
    taught: list[str] = Field(
        default_factory=list,
        description="environment lessons written or merged (the cause behind the alert, the evidence usual on "
        "innocent suspects), as a replay with truth writes them",
    )


def apply_feedback(
    memory: Store,
    incident_id: str,
    *,
    correct: bool,
    root_cause: str | None,
    first_checks: Mapping[str, Action],
    now: datetime,
) -> FeedbackOutcome:
    """Record the verdict; raises :class:`~opsagent.store.StoreError` for an unknown incident and
    ValueError for a root cause that is not ``service/kind``, or names a component the investigation
    did not know of (before anything is written). A verdict teaches the environment what a replay
    with truth teaches it (:func:`opsagent.lessons.about_environment`)."""
    if root_cause is not None:
        service, kind = root_cause_parts(root_cause, kinds=first_checks)
        root_cause = f"{service}/{kind}"
    record = memory.investigation(incident_id)
    report = memory.report(incident_id)
    if root_cause is not None:
        known_component(report, root_cause.partition("/")[0])
    memory.record_feedback(incident_id, correct=correct, root_cause=root_cause)
    outcome = FeedbackOutcome(incident_id=incident_id, correct=correct, root_cause=root_cause)
    top = report.suspects[0].component if report.suspects else None
    if correct:  # a lesson that lowered the conclusion the engineer confirms misled, however it ended
        rc = report.root_cause
        misled = misled_by(report.lessons_used, rc.component, rc.kind, top=top) if rc is not None else []
        # as a replay with truth counts them: a lesson helped where it acted (held back, it changed nothing)
        acted = {u.lesson_id for u in report.lessons_used if u.acted}
        memory.count_use([i for i in record.lessons_used if i in acted and i not in misled], counter="helped")
        memory.count_use(misled, counter="misled")
        outcome = outcome.model_copy(update={"misled": misled})
        if rc is None:
            return outcome
        return outcome.model_copy(update={"taught": _teach(memory, report, rc.component, rc.kind, now, first_checks)})
    if root_cause is None:
        return outcome
    service, _, kind = root_cause.partition("/")
    misled = misled_by(report.lessons_used, service, kind, top=top)
    if misled:
        memory.count_use(misled, counter="misled")
    outcome = outcome.model_copy(
        update={"misled": misled, "taught": _teach(memory, report, service, kind, now, first_checks)}
    )
    try:
        lesson = from_feedback(report, root_cause, now, first_checks=first_checks)
    except ValueError as exc:
        return outcome.model_copy(update={"no_lesson": str(exc)})
    if lesson is None:
        return outcome.model_copy(update={"no_lesson": "the report has no conclusion to correct"})
    memory.upsert_lesson(lesson)
    return outcome.model_copy(update={"lesson": lesson})


def known_component(report: Report, service: str) -> None:
    """A ValueError when the investigation knew of no such component (a typo, another system): what
    is learned from the verdict would act on the wrong environment."""
    known = set(report.situation.components) if report.situation is not None else set()
    known |= {s.component for s in report.suspects} | set(report.incident.services)
    if service not in known:
        near = ", ".join(sorted(known)[:12]) + (" …" if len(known) > 12 else "")
        raise ValueError(f"{service!r} is not a component of investigation {report.incident.id} (it knew of: {near})")


def _teach(
    memory: Store, report: Report, cause: str, kind: str, now: datetime, first_checks: Mapping[str, Action]
) -> list[str]:
    """What the verdict teaches the environment, exactly as a replay with truth would teach it."""
    taught = about_environment(report, cause, kind, now, first_checks=first_checks)
    learn_environment(memory, taught, now=now)
    return [le.id for le in taught]
