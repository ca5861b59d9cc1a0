"""The store for callers without an event loop — the CLI, worker processes, tests and benchmarks:
one connection, each call one transaction, the same operations the service awaits."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from opsagent.lessons import LessonCounter
from opsagent.models import Lesson, Report
from opsagent.store import inbox, incidents, investigations, jobs, lessons, storms
from opsagent.store.errors import StoreError
from opsagent.store.location import StoreLocation
from opsagent.store.records import (
    Accepted,
    ClaimedJob,
    FinishedReport,
    IncidentRecord,
    IncidentState,
    InvestigationRecord,
    InvestigationState,
    JobOutcome,
    NotificationIn,
)
from opsagent.store.sql import Tx
from opsagent.store.storms import StormRow

P = ParamSpec("P")
T = TypeVar("T")
Operation = Callable[Concatenate[Tx, P], Coroutine[Any, Any, T]]


class Database(Protocol):
    """A backend's blocking connection (:class:`~opsagent.store.sqlite.SqliteDatabase`,
    :class:`~opsagent.store.postgres.PostgresDatabase`)."""

    where: str

    def write(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T: ...

    def read(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T: ...

    def probe(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T: ...

    def version(self) -> int: ...

    def close(self) -> None: ...


def connect(location: StoreLocation, *, timeout_s: float = 5.0, upto: int | None = None) -> Database:
    """A blocking connection to the store, its schema migrated (``upto``: only so far, for tests)."""
    if location.kind == "sqlite":
        from opsagent.store.sqlite import SqliteDatabase

        return SqliteDatabase(location.path, timeout_s=timeout_s, upto=upto)
    from opsagent.store.postgres import PostgresDatabase

    return PostgresDatabase(location, upto=upto)


class Store:
    """The store at ``where`` (a SQLite file's path, a ``store_url``, or a :class:`StoreLocation`)."""

    def __init__(self, where: StoreLocation | Path | str, *, timeout_s: float = 5.0, upto: int | None = None) -> None:
        try:
            self.location = StoreLocation.of(where)
        except ValueError as exc:
            raise StoreError(str(exc), where="store_url") from exc
        self._db = connect(self.location, timeout_s=timeout_s, upto=upto)
        self.where = self._db.where

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def schema_version(self) -> int:
        return self._db.version()

    def _missing(self, what: str) -> StoreError:
        return StoreError(f"no {what}", where=self.where)

    # ------------------------------------------------------------ lessons

    def upsert_lesson(self, lesson: Lesson) -> tuple[Lesson, bool]:
        """Store a lesson; a near-duplicate (same id) is merged into the one stored. Returns it and
        whether it was merged."""
        return self._db.write(lessons.upsert_lesson, lesson)

    def replace_lesson(self, lesson: Lesson) -> None:
        if not self._db.write(lessons.replace_lesson, lesson):
            raise self._missing(f"lesson {lesson.id}")

    def lessons(self) -> list[Lesson]:
        return self._db.read(lessons.lessons)

    def lesson(self, lesson_id: str) -> Lesson:
        found = self._db.read(lessons.lesson, lesson_id)
        if found is None:
            raise self._missing(f"lesson {lesson_id}")
        return found

    def delete_lesson(self, lesson_id: str) -> None:
        if not self._db.write(lessons.delete_lesson, lesson_id):
            raise self._missing(f"lesson {lesson_id}")

    def count_use(self, lesson_ids: list[str], *, counter: LessonCounter = "retrieved") -> None:
        self._db.write(lessons.count_use, lesson_ids, counter)

    # ------------------------------------------------------------ investigations

    def save_investigation(self, report: Report) -> None:
        self._db.write(investigations.save_investigation, report.incident.id, FinishedReport.of(report))

    def investigation(self, incident_id: str) -> InvestigationRecord:
        found = self._db.read(investigations.investigation, incident_id)
        if found is None:
            raise self._missing(f"investigation {incident_id} (see `opsagent investigations list`)")
        return found

    def investigations(self, *, limit: int = 50) -> list[InvestigationRecord]:
        """Recorded investigations, most recent first."""
        return self._db.read(investigations.investigations, limit)

    def report(self, incident_id: str) -> Report:
        found = self._db.read(investigations.report, incident_id)
        if found is None:
            raise self._missing(f"investigation {incident_id} (see `opsagent investigations list`)")
        return found

    def record_feedback(self, incident_id: str, *, correct: bool, root_cause: str | None) -> None:
        if not self._db.write(investigations.record_feedback, incident_id, correct=correct, root_cause=root_cause):
            raise self._missing(f"investigation {incident_id}")

    # ------------------------------------------------------------ the webhook service

    def accept(self, notifications: Sequence[NotificationIn]) -> list[Accepted]:
        """Persist notifications in one transaction, deduplicated by alert group (see
        :mod:`opsagent.store.inbox`)."""
        return self._db.write(inbox.accept, notifications)

    def check_writable(self) -> None:
        """Raises :class:`StoreError` unless a notification could be accepted now: the accept path
        runs for a probe and is rolled back."""
        self._db.probe(inbox.accept, [inbox.probe()])

    def claim_job(self, *, owner: str, now: float, lease_s: float, max_attempts: int) -> ClaimedJob | None:
        """The oldest queued job (or one whose lease ran out), leased to ``owner``; see
        :mod:`opsagent.store.jobs`."""
        return self._db.write(jobs.claim_job, owner=owner, now=now, lease_s=lease_s, max_attempts=max_attempts)

    def renew_leases(self, job_ids: Sequence[int], *, owner: str, until: float) -> None:
        self._db.write(jobs.renew_leases, job_ids, owner=owner, until=until)

    def requeue_orphans(self, is_orphan: Callable[[str], bool]) -> list[int]:
        return self._db.write(jobs.requeue_orphans, is_orphan)

    def release_job(self, job_id: int, *, owner: str, error: str, attempt: bool = True) -> None:
        self._db.write(jobs.release_job, job_id, owner=owner, error=error, attempt=attempt)

    def finish_job(
        self,
        job_id: int,
        *,
        owner: str,
        now: datetime,
        outcome: JobOutcome | None = None,
        report: FinishedReport | None = None,
        error: str | None = None,
    ) -> IncidentRecord | None:
        return self._db.write(
            jobs.finish_job, job_id, owner=owner, now=now, outcome=outcome, report=report, error=error
        )

    def job_counts(self, states: Sequence[str] = ("queued", "running", "done", "failed")) -> dict[str, int]:
        return self._db.read(jobs.job_counts, states)

    def prune(self, *, before: datetime, batch: int = 500) -> int:
        return self._db.write(incidents.prune, before=before, batch=batch)

    def notification_count(self) -> int:
        return self._db.read(incidents.notification_count)

    def storms(self) -> list[StormRow]:
        """The alert storms the webhook holds, least recently touched first."""
        return self._db.read(storms.held)

    def storm_fingerprints(self) -> int:
        """Alerts indexed by fingerprint across the storms held (bounded like the storms)."""
        return self._db.read(storms.fingerprints_held)

    def incidents(
        self,
        *,
        state: IncidentState | None = None,
        investigation: InvestigationState | None = None,
        service: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[IncidentRecord]:
        """Incidents, most recent first."""
        return self._db.read(
            incidents.incidents, state=state, investigation=investigation, service=service, limit=limit, offset=offset
        )

    def incident(self, incident_id: str) -> IncidentRecord | None:
        return self._db.read(incidents.incident, incident_id)

    def incident_charts(self, incident_id: str) -> str:
        return self._db.read(incidents.incident_charts, incident_id)

    def has_report(self, incident_id: str) -> bool:
        return self._db.read(incidents.has_report, incident_id)
