"""The embedded store: one SQLite file under the data directory (lessons, investigation records, and
the webhook service's incidents, notifications and durable job queue).

Schema versions are applied in order from ``MIGRATIONS`` and recorded in ``PRAGMA user_version``.
WAL mode and a busy timeout let the CLI and the service use the file at once. A corrupt or locked
file is a :class:`StoreError` naming the file and what to do; the store never rewrites a file it
cannot read, so nothing is lost.

Nothing is written unredacted: reports, lessons, notification payloads and error texts pass
through :mod:`opsagent.redaction` on their way in, so no reader of the file (or of an API that
serves it) sees a secret a report would not show.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from opsagent.errors import UserError
from opsagent.lessons import LessonCounter, merge
from opsagent.models import Lesson, Report
from opsagent.redaction import Redactor, redactors, scrub, scrub_json, scrub_model

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE lessons (
        id TEXT PRIMARY KEY,
        refuted_kind TEXT NOT NULL,
        body TEXT NOT NULL,
        count INTEGER NOT NULL DEFAULT 1,
        times_retrieved INTEGER NOT NULL DEFAULT 0,
        times_helped INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE TABLE investigations (
        incident_id TEXT PRIMARY KEY,
        created_at TEXT NOT NULL,
        status TEXT NOT NULL,
        root_component TEXT,
        root_kind TEXT,
        report TEXT NOT NULL,
        lessons_used TEXT NOT NULL DEFAULT '[]',
        feedback TEXT,
        feedback_root_cause TEXT
    );
    """,
    # 2: the webhook service. One incident per open alert group (groupKey); every accepted
    # notification is kept; a job per incident to investigate, leased by the process running it.
    """
    CREATE TABLE incidents (
        id TEXT PRIMARY KEY,
        group_key TEXT NOT NULL,
        state TEXT NOT NULL,
        investigation TEXT NOT NULL,
        service TEXT NOT NULL,
        alertname TEXT NOT NULL,
        title TEXT NOT NULL,
        receiver TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        resolved_at TEXT,
        notifications INTEGER NOT NULL DEFAULT 1,
        outcome TEXT,
        root_component TEXT,
        root_kind TEXT,
        summary TEXT,
        source TEXT,
        wall_ms REAL,
        charts TEXT NOT NULL DEFAULT '[]',
        error TEXT
    );
    CREATE UNIQUE INDEX incidents_open_group ON incidents (group_key) WHERE resolved_at IS NULL;
    CREATE INDEX incidents_recent ON incidents (created_at);
    CREATE INDEX incidents_service ON incidents (service, created_at);
    CREATE TABLE notifications (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        incident_id TEXT,
        group_key TEXT NOT NULL,
        status TEXT NOT NULL,
        action TEXT NOT NULL,
        received_at TEXT NOT NULL,
        payload TEXT NOT NULL
    );
    CREATE INDEX notifications_incident ON notifications (incident_id);
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        incident_id TEXT NOT NULL,
        notification_id INTEGER NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        owner TEXT,
        lease_until REAL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        error TEXT
    );
    CREATE INDEX jobs_pending ON jobs (status, id);
    """,
    # 3: retention (incidents untouched for a while are pruned with their jobs); the latest start of
    # the alerts an incident has seen (a later firing of only newer alerts is a new episode); how often
    # a lesson lowered what turned out to be the cause.
    """
    CREATE INDEX incidents_updated ON incidents (updated_at);
    CREATE INDEX jobs_incident ON jobs (incident_id);
    ALTER TABLE incidents ADD COLUMN alerts_started TEXT;
    ALTER TABLE lessons ADD COLUMN times_misled INTEGER NOT NULL DEFAULT 0;
    """,
)


class StoreError(UserError):
    def __init__(self, message: str, *, path: Path) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")


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


#: An investigation's row, its title read from the stored report (SQLite's json_extract).
_INVESTIGATION_COLUMNS = (
    "incident_id, created_at, status, root_component, root_kind, lessons_used, feedback, feedback_root_cause,"
    " json_extract(report, '$.incident.title')"
)


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


class JobOutcome(BaseModel):
    """How a job's investigation ended, as the incident row keeps it (the report is in ``investigations``)."""

    outcome: str
    root_component: str | None = None
    root_kind: str | None = None
    summary: str | None = None
    source: str | None = None
    wall_ms: float | None = None
    charts: str = "[]"


_LESSON_COLUMNS = "body, count, times_retrieved, times_helped, times_misled"

_INCIDENT_COLUMNS = (
    "id, group_key, state, investigation, service, alertname, title, receiver, created_at, updated_at,"
    " resolved_at, notifications, outcome, root_component, root_kind, summary, source, wall_ms, error"
)


def _instant(when: datetime | None) -> str | None:
    """A UTC time as fixed-width text (microseconds always written), so that text order is time order."""
    return None if when is None else when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


def _new_episode(seen_started: str | None, n: NotificationIn) -> bool:
    """Whether a firing notification for a group with an open incident is a new episode of it: every
    alert in it started after every alert the incident has seen (``seen_started``, the latest start;
    the same clock on both sides), so the episode the incident is about ended without its
    ``resolved`` reaching us."""
    first = _instant(n.first_started)
    return n.status == "firing" and first is not None and seen_started is not None and first > seen_started


def _redacted(n: NotificationIn, chain: Sequence[Redactor]) -> NotificationIn:
    """A notification as stored: its payload's strings and what it is listed by, redacted."""
    listed = scrub_model(n.model_copy(update={"payload": ""}), chain)
    return listed.model_copy(update={"payload": scrub_json(n.payload, chain)})


def _incident(row: Sequence[object]) -> IncidentRecord:
    return IncidentRecord.model_validate(dict(zip(_INCIDENT_COLUMNS.replace(" ", "").split(","), row, strict=True)))


class Store:
    def __init__(self, path: Path, *, timeout_s: float = 5.0) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=timeout_s, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the store: {exc}", path=path) from exc
        with self._guard():
            self._db.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._migrate()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise StoreError(
                    "the store is locked by another opsagent process; try again in a moment", path=self.path
                ) from exc
            raise StoreError(f"store error: {exc}", path=self.path) from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"not a readable opsagent store ({exc}); nothing was changed. Move the file aside "
                "(lessons can be re-imported from an export) or point OPSAGENT_DATA_DIR elsewhere",
                path=self.path,
            ) from exc

    @contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """A read: the rows (a damaged page is the same error as a damaged header, from
        :meth:`_guard`) and what they hold (a stored report that no longer validates)."""
        with self._guard():
            try:
                yield
            except (ValidationError, ValueError) as exc:
                raise StoreError(
                    f"a stored {what} cannot be read ({str(exc).splitlines()[0]}); nothing was changed", path=self.path
                ) from exc

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._guard():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                if self._db.in_transaction:  # an I/O error may have rolled it back already
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            raise StoreError(
                f"written by a newer opsagent (schema {version}, this one knows {len(MIGRATIONS)})", path=self.path
            )
        for index in range(version, len(MIGRATIONS)):
            with self._transaction() as db:
                for statement in MIGRATIONS[index].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {index + 1}")

    # ------------------------------------------------------------ lessons

    def upsert_lesson(self, lesson: Lesson) -> tuple[Lesson, bool]:
        """Store a lesson; a near-duplicate (same id) is merged into the one stored. Returns it and
        whether it was merged."""
        with self._transaction() as db:
            return self._upsert_lesson(db, lesson)

    def _upsert_lesson(self, db: sqlite3.Connection, lesson: Lesson) -> tuple[Lesson, bool]:
        lesson = scrub_model(lesson)
        now = datetime.now(UTC).isoformat()
        row = db.execute("SELECT body, count FROM lessons WHERE id = ?", (lesson.id,)).fetchone()
        if row is None:
            db.execute(
                "INSERT INTO lessons (id, refuted_kind, body, count, times_retrieved, times_helped, times_misled,"
                " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    lesson.id,
                    lesson.refuted_kind,
                    lesson.model_dump_json(),
                    lesson.count,
                    lesson.times_retrieved,
                    lesson.times_helped,
                    lesson.times_misled,
                    lesson.created_at.isoformat(),
                    now,
                ),
            )
            return lesson, False
        stored = self._lesson(row[0], count=row[1])
        merged = merge(stored, lesson)
        db.execute(
            "UPDATE lessons SET body = ?, count = ?, updated_at = ? WHERE id = ?",
            (merged.model_dump_json(), merged.count, now, lesson.id),
        )
        return merged, True

    def replace_lesson(self, lesson: Lesson) -> None:
        lesson = scrub_model(lesson)
        with self._transaction() as db:
            found = db.execute(
                "UPDATE lessons SET body = ?, refuted_kind = ?, updated_at = ? WHERE id = ?",
                (lesson.model_dump_json(), lesson.refuted_kind, datetime.now(UTC).isoformat(), lesson.id),
            ).rowcount
        if not found:
            raise StoreError(f"no lesson {lesson.id}", path=self.path)

    def lessons(self) -> list[Lesson]:
        with self._reading("lesson"):
            rows = self._db.execute(f"SELECT {_LESSON_COLUMNS} FROM lessons ORDER BY created_at DESC, id").fetchall()
            return [self._lesson(b, count=c, retrieved=r, helped=h, misled=m) for b, c, r, h, m in rows]

    def lesson(self, lesson_id: str) -> Lesson:
        with self._reading("lesson"):
            row = self._db.execute(f"SELECT {_LESSON_COLUMNS} FROM lessons WHERE id = ?", (lesson_id,)).fetchone()
            if row is None:
                raise StoreError(f"no lesson {lesson_id}", path=self.path)
            return self._lesson(row[0], count=row[1], retrieved=row[2], helped=row[3], misled=row[4])

    def delete_lesson(self, lesson_id: str) -> None:
        with self._transaction() as db:
            if not db.execute("DELETE FROM lessons WHERE id = ?", (lesson_id,)).rowcount:
                raise StoreError(f"no lesson {lesson_id}", path=self.path)

    def count_use(self, lesson_ids: list[str], *, counter: LessonCounter = "retrieved") -> None:
        column = f"times_{counter}"
        with self._transaction() as db:
            db.executemany(f"UPDATE lessons SET {column} = {column} + 1 WHERE id = ?", [(i,) for i in lesson_ids])

    def _lesson(self, body: str, *, count: int, retrieved: int = 0, helped: int = 0, misled: int = 0) -> Lesson:
        try:
            lesson = Lesson.model_validate_json(body)
        except ValidationError as exc:
            raise StoreError(f"a stored lesson does not validate: {exc}", path=self.path) from exc
        counts = {"count": count, "times_retrieved": retrieved, "times_helped": helped, "times_misled": misled}
        return lesson.model_copy(update=counts)

    # ------------------------------------------------------------ investigations

    def save_investigation(self, report: Report) -> None:
        with self._transaction() as db:
            self._save_investigation(db, report.incident.id, FinishedReport.of(report))

    @staticmethod
    def _save_investigation(db: sqlite3.Connection, incident_id: str, finished: FinishedReport) -> None:
        db.execute(
            "INSERT OR REPLACE INTO investigations (incident_id, created_at, status, root_component, root_kind,"
            " report, lessons_used) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                incident_id,
                datetime.now(UTC).isoformat(),
                finished.status,
                finished.root_component,
                finished.root_kind,
                finished.report,
                json.dumps(finished.lessons_used),
            ),
        )

    def investigation(self, incident_id: str) -> InvestigationRecord:
        with self._reading("investigation"):
            row = self._db.execute(
                f"SELECT {_INVESTIGATION_COLUMNS} FROM investigations WHERE incident_id = ?", (incident_id,)
            ).fetchone()
            if row is None:
                raise StoreError(f"no investigation {incident_id} (see `opsagent investigations list`)", path=self.path)
            return self._investigation(row)

    def investigations(self, *, limit: int = 50) -> list[InvestigationRecord]:
        """Recorded investigations, most recent first."""
        with self._reading("investigation"):
            rows = self._db.execute(
                f"SELECT {_INVESTIGATION_COLUMNS} FROM investigations ORDER BY created_at DESC, incident_id LIMIT ?",
                (limit,),
            ).fetchall()
            return [self._investigation(r) for r in rows]

    @staticmethod
    def _investigation(row: Sequence[Any]) -> InvestigationRecord:
        return InvestigationRecord(
            incident_id=row[0],
            created_at=datetime.fromisoformat(row[1]),
            status=row[2],
            root_component=row[3],
            root_kind=row[4],
            lessons_used=json.loads(row[5]),
            feedback=row[6],
            feedback_root_cause=row[7],
            title=row[8],
        )

    def report(self, incident_id: str) -> Report:
        with self._reading("report"):
            row = self._db.execute("SELECT report FROM investigations WHERE incident_id = ?", (incident_id,)).fetchone()
            if row is None:
                raise StoreError(f"no investigation {incident_id} (see `opsagent investigations list`)", path=self.path)
            return Report.model_validate_json(row[0])

    def record_feedback(self, incident_id: str, *, correct: bool, root_cause: str | None) -> None:
        with self._transaction() as db:
            found = db.execute(
                "UPDATE investigations SET feedback = ?, feedback_root_cause = ? WHERE incident_id = ?",
                ("correct" if correct else "wrong", root_cause, incident_id),
            ).rowcount
        if not found:
            raise StoreError(f"no investigation {incident_id}", path=self.path)

    # ------------------------------------------------------------ the webhook service

    def defer_checkpoints(self) -> None:
        """This connection's commits stop copying the WAL into the database file: whoever calls
        :meth:`checkpoint` does it instead, off the path that answers webhooks."""
        with self._guard():
            self._db.execute("PRAGMA wal_autocheckpoint = 0")

    def checkpoint(self) -> None:
        with self._guard():
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def accept(self, notifications: Sequence[NotificationIn]) -> list[Accepted]:
        """Persist notifications in one transaction (the service commits concurrent requests
        together), deduplicated by alert group: a group with an open incident updates it, a
        ``resolved`` one resolves it; a firing group without one opens an incident and queues a job."""
        chain = redactors()  # once a batch: the secrets to mask are this process's, read from its environment
        cleaned = [_redacted(n, chain) for n in notifications]
        with self._transaction() as db:
            return self._accept(db, cleaned)

    def check_writable(self) -> None:
        """Raises :class:`StoreError` unless a notification could be accepted now: the accept path
        runs for a probe (the incidents, notifications and jobs it reads and writes) and is rolled
        back. What readiness reports: a store whose pages are damaged reads fine elsewhere."""
        probe = NotificationIn(
            group_key="opsagent:readiness-probe",
            status="firing",
            receiver="-",
            service="-",
            alertname="-",
            title="-",
            payload="{}",
            received_at=datetime.now(UTC),
        )
        with self._guard():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._accept(self._db, [probe])
            finally:
                if self._db.in_transaction:  # an I/O error may have rolled it back already
                    self._db.execute("ROLLBACK")

    def _accept(self, db: sqlite3.Connection, notifications: Sequence[NotificationIn]) -> list[Accepted]:
        out: list[Accepted] = []
        for n in notifications:
            when = n.received_at.isoformat()
            row = db.execute(
                "SELECT id, alerts_started FROM incidents WHERE group_key = ? AND resolved_at IS NULL",
                (n.group_key,),
            ).fetchone()
            incident_id: str | None = row[0] if row else None
            seen_started: str | None = row[1] if row else None
            started = _instant(n.last_started)
            if incident_id is not None and _new_episode(seen_started, n):
                db.execute(
                    "UPDATE incidents SET state = 'resolved', resolved_at = ?, updated_at = ? WHERE id = ?",
                    (when, when, incident_id),
                )
                incident_id = None  # its end was never heard: this firing opens an incident of its own
            action: Literal["opened", "updated", "resolved", "ignored"]
            if incident_id is None:
                action = "ignored" if n.status == "resolved" else "opened"
            else:
                action = "resolved" if n.status == "resolved" else "updated"
            cur = db.execute(
                "INSERT INTO notifications (incident_id, group_key, status, action, received_at, payload)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (incident_id, n.group_key, n.status, action, when, n.payload),
            )
            notification_id = int(cur.lastrowid or 0)
            job_id = None
            if action == "opened":
                digest = hashlib.sha1(f"{n.group_key}|{when}|{notification_id}".encode()).hexdigest()[:12]
                incident_id = f"inc-{digest}"
                db.execute(
                    "INSERT INTO incidents (id, group_key, state, investigation, service, alertname, title,"
                    " receiver, created_at, updated_at, alerts_started)"
                    " VALUES (?, ?, 'firing', 'queued', ?, ?, ?, ?, ?, ?, ?)",
                    (incident_id, n.group_key, n.service, n.alertname, n.title, n.receiver, when, when, started),
                )
                db.execute("UPDATE notifications SET incident_id = ? WHERE id = ?", (incident_id, notification_id))
                cur = db.execute(
                    "INSERT INTO jobs (incident_id, notification_id, status, created_at, updated_at)"
                    " VALUES (?, ?, 'queued', ?, ?)",
                    (incident_id, notification_id, when, when),
                )
                job_id = int(cur.lastrowid or 0)
            elif action in ("updated", "resolved"):
                # the latest start the incident has seen (fixed-width UTC stamps: text order is time order)
                latest = max((t for t in (seen_started, started) if t is not None), default=None)
                db.execute(
                    "UPDATE incidents SET notifications = notifications + 1, updated_at = ?,"
                    " state = CASE WHEN ? = 'resolved' THEN 'resolved' ELSE state END,"
                    " resolved_at = CASE WHEN ? = 'resolved' THEN ? ELSE resolved_at END,"
                    " alerts_started = ? WHERE id = ?",
                    (when, action, action, when, latest, incident_id),
                )
            out.append(Accepted(notification_id=notification_id, incident_id=incident_id, action=action, job_id=job_id))
        return out

    def claim_job(self, *, owner: str, now: float, lease_s: float, max_attempts: int) -> ClaimedJob | None:
        """The oldest queued job (or one whose lease ran out), leased to ``owner``. A job tried
        ``max_attempts`` times already is marked failed instead, so a poison job cannot loop."""
        stamp = datetime.fromtimestamp(now, UTC).isoformat()
        with self._transaction() as db:
            while True:
                row = db.execute(
                    "SELECT j.id, j.incident_id, j.attempts, n.payload FROM jobs j JOIN notifications n"
                    " ON n.id = j.notification_id WHERE j.status = 'queued' OR (j.status = 'running'"
                    " AND j.lease_until < ?) ORDER BY j.id LIMIT 1",
                    (now,),
                ).fetchone()
                if row is None:
                    return None
                job_id, incident_id, attempts, payload = row
                if attempts >= max_attempts:
                    error = f"gave up after {attempts} attempt(s): the worker died or timed out each time"
                    self._end_job(db, job_id, incident_id, status="failed", error=error, stamp=stamp)
                    continue
                db.execute(
                    "UPDATE jobs SET status = 'running', owner = ?, lease_until = ?, attempts = attempts + 1,"
                    " updated_at = ? WHERE id = ?",
                    (owner, now + lease_s, stamp, job_id),
                )
                db.execute(
                    "UPDATE incidents SET investigation = 'running', updated_at = ? WHERE id = ?", (stamp, incident_id)
                )
                return ClaimedJob(id=job_id, incident_id=incident_id, attempts=attempts + 1, payload=payload)

    def renew_leases(self, job_ids: Sequence[int], *, owner: str, until: float) -> None:
        with self._transaction() as db:
            db.executemany(
                "UPDATE jobs SET lease_until = ? WHERE id = ? AND owner = ? AND status = 'running'",
                [(until, job_id, owner) for job_id in job_ids],
            )

    def requeue_orphans(self, is_orphan: Callable[[str], bool]) -> list[int]:
        """Running jobs whose owner is gone (a process killed between accept and completion) go
        back to the queue at once, rather than when their lease runs out."""
        with self._transaction() as db:
            rows = db.execute("SELECT id, incident_id, owner FROM jobs WHERE status = 'running'").fetchall()
            orphans = [(job_id, incident_id) for job_id, incident_id, owner in rows if is_orphan(owner or "")]
            for job_id, incident_id in orphans:
                db.execute(
                    "UPDATE jobs SET status = 'queued', owner = NULL, lease_until = NULL WHERE id = ?", (job_id,)
                )
                db.execute("UPDATE incidents SET investigation = 'queued' WHERE id = ?", (incident_id,))
        return [job_id for job_id, _ in orphans]

    def release_job(self, job_id: int, *, owner: str, error: str, attempt: bool = True) -> None:
        """Give a running job back to the queue: after a failure worth retrying (the attempt counts),
        or because the service is stopping (``attempt=False``: it does not)."""
        error = scrub(error)
        with self._transaction() as db:
            row = db.execute(
                "SELECT incident_id FROM jobs WHERE id = ? AND owner = ? AND status = 'running'", (job_id, owner)
            ).fetchone()
            if row is None:
                return
            db.execute(
                "UPDATE jobs SET status = 'queued', owner = NULL, lease_until = NULL, error = ?,"
                " attempts = attempts - ? WHERE id = ?",
                (error, 0 if attempt else 1, job_id),
            )
            db.execute("UPDATE incidents SET investigation = 'queued', error = ? WHERE id = ?", (error, row[0]))

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
        """Record how a job ended, in one transaction: its outcome on the incident, its report, the
        lessons it used and taught; or the error that failed it. A job this owner no longer holds
        (its lease ran out and another took it) is left alone: None."""
        error = scrub(error) if error is not None else None
        outcome = scrub_model(outcome) if outcome is not None else None
        with self._transaction() as db:
            row = db.execute(
                "SELECT incident_id FROM jobs WHERE id = ? AND owner = ? AND status = 'running'", (job_id, owner)
            ).fetchone()
            if row is None:
                return None
            incident_id = row[0]
            stamp = now.isoformat()
            if outcome is None:
                self._end_job(db, job_id, incident_id, status="failed", error=error or "failed", stamp=stamp)
            else:
                self._end_job(db, job_id, incident_id, status="done", error=None, stamp=stamp)
                if report is not None:
                    self._save_investigation(db, incident_id, report)
                    db.executemany(
                        "UPDATE lessons SET times_retrieved = times_retrieved + 1 WHERE id = ?",
                        [(i,) for i in report.lessons_used],
                    )
                    for lesson in report.lessons:
                        self._upsert_lesson(db, lesson)
                db.execute(
                    "UPDATE incidents SET outcome = ?, root_component = ?, root_kind = ?, summary = ?, source = ?,"
                    " wall_ms = ?, charts = ?, error = NULL WHERE id = ?",
                    (
                        outcome.outcome,
                        outcome.root_component,
                        outcome.root_kind,
                        outcome.summary,
                        outcome.source,
                        outcome.wall_ms,
                        outcome.charts,
                        incident_id,
                    ),
                )
            found = db.execute(f"SELECT {_INCIDENT_COLUMNS} FROM incidents WHERE id = ?", (incident_id,)).fetchone()
        return _incident(found)

    @staticmethod
    def _end_job(
        db: sqlite3.Connection, job_id: int, incident_id: str, *, status: str, error: str | None, stamp: str
    ) -> None:
        db.execute(
            "UPDATE jobs SET status = ?, error = ?, lease_until = NULL, updated_at = ? WHERE id = ?",
            (status, error, stamp, job_id),
        )
        db.execute(
            "UPDATE incidents SET investigation = ?, error = ?, outcome = CASE WHEN ? = 'failed' THEN 'failed'"
            " ELSE outcome END, updated_at = ? WHERE id = ?",
            (status, error, status, stamp, incident_id),
        )

    def job_counts(self, states: Sequence[str] = ("queued", "running", "done", "failed")) -> dict[str, int]:
        """Jobs by state. Asked for the pending ones only (the queue's depth), it reads just those
        entries of the ``(status, id)`` index, however many jobs have finished."""
        marks = ",".join("?" * len(states))
        with self._guard():
            rows = self._db.execute(
                f"SELECT status, COUNT(*) FROM jobs WHERE status IN ({marks}) GROUP BY status", tuple(states)
            ).fetchall()
        counts = dict.fromkeys(states, 0)
        counts.update({status: n for status, n in rows})
        return counts

    def prune(self, *, before: datetime, batch: int = 500) -> int:
        """Delete up to ``batch`` incidents untouched since ``before`` whose investigation is over,
        with their notifications, job and report, and the ignored notifications received before
        it; lessons stay. Returns how many incidents went (call again while it returns ``batch``)."""
        cutoff = before.astimezone(UTC).isoformat()
        with self._transaction() as db:
            ids = [
                row[0]
                for row in db.execute(
                    "SELECT id FROM incidents WHERE updated_at < ? AND investigation IN ('done', 'failed') LIMIT ?",
                    (cutoff, batch),
                )
            ]
            if ids:
                marks = ",".join("?" * len(ids))
                for table, column in (
                    ("notifications", "incident_id"),
                    ("jobs", "incident_id"),
                    ("investigations", "incident_id"),
                    ("incidents", "id"),
                ):
                    db.execute(f"DELETE FROM {table} WHERE {column} IN ({marks})", ids)
            db.execute(
                "DELETE FROM notifications WHERE id IN (SELECT id FROM notifications"
                " WHERE incident_id IS NULL AND received_at < ? LIMIT ?)",
                (cutoff, batch),
            )
        return len(ids)

    def notification_count(self) -> int:
        with self._guard():
            return int(self._db.execute("SELECT COUNT(*) FROM notifications").fetchone()[0])

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
        where, args = [], []
        for column, value in (("state", state), ("investigation", investigation), ("service", service)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        with self._reading("incident"):
            rows = self._db.execute(
                f"SELECT {_INCIDENT_COLUMNS} FROM incidents{clause} ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
                (*args, limit, offset),
            ).fetchall()
            return [_incident(r) for r in rows]

    def incident(self, incident_id: str) -> IncidentRecord | None:
        with self._reading("incident"):
            row = self._db.execute(f"SELECT {_INCIDENT_COLUMNS} FROM incidents WHERE id = ?", (incident_id,)).fetchone()
            return _incident(row) if row is not None else None

    def incident_charts(self, incident_id: str) -> str:
        with self._guard():
            row = self._db.execute("SELECT charts FROM incidents WHERE id = ?", (incident_id,)).fetchone()
        return row[0] if row is not None else "[]"

    def has_report(self, incident_id: str) -> bool:
        with self._guard():
            return (
                self._db.execute("SELECT 1 FROM investigations WHERE incident_id = ?", (incident_id,)).fetchone()
                is not None
            )
