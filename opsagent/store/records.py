"""The store's rows as the rest of opsagent sees them (pydantic models), and the rules about them
that need no database: a stamp's text form, when a firing notification is a new episode, what of a
notification is redacted before it is written."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field

from opsagent.models import Lesson, Report
from opsagent.redaction import Redactor, scrub_json, scrub_model


class InvestigationRecord(BaseModel):
    incident_id: str
    created_at: datetime
    status: str
    root_component: str | None
    root_kind: str | None
    lessons_used: list[str]
    feedback: str | None
    feedback_root_cause: str | None
    title: str | None = None


IncidentState = Literal["firing", "resolved"]
InvestigationState = Literal["queued", "running", "done", "failed"]


class NotificationIn(BaseModel):
    """One webhook notification, as the service accepts it: what dedup and listing need, and the
    payload itself (JSON) for the job that investigates it."""

    group_key: str
    status: IncidentState
    receiver: str
    service: str
    alertname: str
    title: str
    payload: str
    received_at: datetime
    #: when the earliest and the latest of its firing alerts started (None: none fires, or the list
    #: was truncated); both by the alerting side's clock, compared only with each other
    first_started: datetime | None = None
    last_started: datetime | None = None


class Accepted(BaseModel):
    """What accepting a notification did: ``opened`` an incident (and queued a job), ``updated`` the
    open incident of its group, ``resolved`` it, or ``ignored`` a resolution of no open incident."""

    notification_id: int
    incident_id: str | None
    action: Literal["opened", "updated", "resolved", "ignored"]
    job_id: int | None = None


class IncidentRecord(BaseModel):
    id: str
    group_key: str
    state: IncidentState
    investigation: InvestigationState
    service: str
    alertname: str
    title: str
    receiver: str
    created_at: datetime
    updated_at: datetime
    resolved_at: datetime | None
    notifications: int
    outcome: str | None = None
    root_component: str | None = None
    root_kind: str | None = None
    summary: str | None = None
    source: str | None = None
    wall_ms: float | None = None
    error: str | None = None


class FinishedReport(BaseModel):
    """A report as stored: serialised once, by whoever wrote it (a worker process), with the
    lessons it used and the lessons it teaches."""

    status: str
    root_component: str | None
    root_kind: str | None
    report: str
    lessons_used: list[str] = Field(default_factory=list)
    lessons: list[Lesson] = Field(default_factory=list)

    @classmethod
    def of(cls, report: Report, *, lessons: Sequence[Lesson] = ()) -> FinishedReport:
        report = scrub_model(report)
        rc = report.root_cause
        return cls(
            status=report.status,
            root_component=rc.component if rc else None,
            root_kind=rc.kind if rc else None,
            report=report.model_dump_json(),
            lessons_used=[u.lesson_id for u in report.lessons_used],
            lessons=list(lessons),
        )


class ClaimedJob(BaseModel):
    id: int
    incident_id: str
    attempts: int
    payload: str
    #: the payloads of the incident's later firing notifications (an alert storm's other alerts)
    joined: list[str] = []


class JobOutcome(BaseModel):
    """How a job's investigation ended, as the incident row keeps it (the report is in ``investigations``)."""

    outcome: str
    root_component: str | None = None
    root_kind: str | None = None
    summary: str | None = None
    source: str | None = None
    wall_ms: float | None = None
    charts: str = "[]"


LESSON_COLUMNS = "body, count, times_retrieved, times_helped, times_misled"

INCIDENT_COLUMNS = (
    "id, group_key, state, investigation, service, alertname, title, receiver, created_at, updated_at,"
    " resolved_at, notifications, outcome, root_component, root_kind, summary, source, wall_ms, error"
)


def instant(when: datetime) -> str:
    """A UTC time as fixed-width text (microseconds always written), so that text order is time order
    in any collation (a PostgreSQL database's may ignore punctuation: equal widths keep it right)."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


def maybe_instant(when: datetime | None) -> str | None:
    return None if when is None else instant(when)


def now() -> str:
    return instant(datetime.now(UTC))


def new_episode(seen_started: str | None, n: NotificationIn) -> bool:
    """Whether a firing notification for a group with an open incident is a new episode of it: every
    alert in it started after every alert the incident has seen (``seen_started``, the latest start;
    the same clock on both sides), so the episode the incident is about ended without its
    ``resolved`` reaching us."""
    first = maybe_instant(n.first_started)
    return n.status == "firing" and first is not None and seen_started is not None and first > seen_started


def redacted(n: NotificationIn, chain: Sequence[Redactor]) -> NotificationIn:
    """A notification as stored: its payload's strings and what it is listed by, redacted."""
    listed = scrub_model(n.model_copy(update={"payload": ""}), chain)
    return listed.model_copy(update={"payload": scrub_json(n.payload, chain)})


def incident_of(row: Sequence[object]) -> IncidentRecord:
    return IncidentRecord.model_validate(dict(zip(INCIDENT_COLUMNS.replace(" ", "").split(","), row, strict=True)))
