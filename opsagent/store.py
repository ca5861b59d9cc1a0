"""The embedded store: one SQLite file under the data directory (lessons, investigation records).

Schema versions are applied in order from ``MIGRATIONS`` and recorded in ``PRAGMA user_version``.
WAL mode and a busy timeout let the CLI and the service use the file at once. A corrupt or locked
file is a :class:`StoreError` naming the file and what to do; the store never rewrites a file it
cannot read, so nothing is lost.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ValidationError

from opsagent.errors import UserError
from opsagent.lessons import merge
from opsagent.models import Lesson, Report

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
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._guard():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
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
        now = datetime.now(UTC).isoformat()
        with self._transaction() as db:
            row = db.execute("SELECT body, count FROM lessons WHERE id = ?", (lesson.id,)).fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO lessons (id, refuted_kind, body, count, times_retrieved, times_helped, created_at,"
                    " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        lesson.id,
                        lesson.refuted_kind,
                        lesson.model_dump_json(),
                        lesson.count,
                        lesson.times_retrieved,
                        lesson.times_helped,
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
        with self._transaction() as db:
            found = db.execute(
                "UPDATE lessons SET body = ?, refuted_kind = ?, updated_at = ? WHERE id = ?",
                (lesson.model_dump_json(), lesson.refuted_kind, datetime.now(UTC).isoformat(), lesson.id),
            ).rowcount
        if not found:
            raise StoreError(f"no lesson {lesson.id}", path=self.path)

    def lessons(self) -> list[Lesson]:
        with self._guard():
            rows = self._db.execute(
                "SELECT body, count, times_retrieved, times_helped FROM lessons ORDER BY created_at DESC, id"
            ).fetchall()
        return [self._lesson(b, count=c, retrieved=r, helped=h) for b, c, r, h in rows]

    def lesson(self, lesson_id: str) -> Lesson:
        with self._guard():
            row = self._db.execute(
                "SELECT body, count, times_retrieved, times_helped FROM lessons WHERE id = ?", (lesson_id,)
            ).fetchone()
        if row is None:
            raise StoreError(f"no lesson {lesson_id}", path=self.path)
        return self._lesson(row[0], count=row[1], retrieved=row[2], helped=row[3])

    def delete_lesson(self, lesson_id: str) -> None:
        with self._transaction() as db:
            if not db.execute("DELETE FROM lessons WHERE id = ?", (lesson_id,)).rowcount:
                raise StoreError(f"no lesson {lesson_id}", path=self.path)

    def count_use(self, lesson_ids: list[str], *, helped: bool = False) -> None:
        column = "times_helped" if helped else "times_retrieved"
        with self._transaction() as db:
            db.executemany(f"UPDATE lessons SET {column} = {column} + 1 WHERE id = ?", [(i,) for i in lesson_ids])

    def _lesson(self, body: str, *, count: int, retrieved: int = 0, helped: int = 0) -> Lesson:
        try:
            lesson = Lesson.model_validate_json(body)
        except ValidationError as exc:
            raise StoreError(f"a stored lesson does not validate: {exc}", path=self.path) from exc
        return lesson.model_copy(update={"count": count, "times_retrieved": retrieved, "times_helped": helped})

    # ------------------------------------------------------------ investigations

    def save_investigation(self, report: Report) -> None:
        rc = report.root_cause
        with self._transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO investigations (incident_id, created_at, status, root_component, root_kind,"
                " report, lessons_used) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    report.incident.id,
                    datetime.now(UTC).isoformat(),
                    report.status,
                    rc.component if rc else None,
                    rc.kind if rc else None,
                    report.model_dump_json(),
                    json.dumps([u.lesson_id for u in report.lessons_used]),
                ),
            )

    def investigation(self, incident_id: str) -> InvestigationRecord:
        with self._guard():
            row = self._db.execute(
                "SELECT incident_id, created_at, status, root_component, root_kind, lessons_used, feedback,"
                " feedback_root_cause FROM investigations WHERE incident_id = ?",
                (incident_id,),
            ).fetchone()
        if row is None:
            raise StoreError(f"no investigation {incident_id} (see `opsagent lessons list`?)", path=self.path)
        return InvestigationRecord(
            incident_id=row[0],
            created_at=datetime.fromisoformat(row[1]),
            status=row[2],
            root_component=row[3],
            root_kind=row[4],
            lessons_used=json.loads(row[5]),
            feedback=row[6],
            feedback_root_cause=row[7],
        )

    def report(self, incident_id: str) -> Report:
        with self._guard():
            row = self._db.execute("SELECT report FROM investigations WHERE incident_id = ?", (incident_id,)).fetchone()
        if row is None:
            raise StoreError(f"no investigation {incident_id}", path=self.path)
        return Report.model_validate_json(row[0])

    def record_feedback(self, incident_id: str, *, correct: bool, root_cause: str | None) -> None:
        with self._transaction() as db:
            found = db.execute(
                "UPDATE investigations SET feedback = ?, feedback_root_cause = ? WHERE incident_id = ?",
                ("correct" if correct else "wrong", root_cause, incident_id),
            ).rowcount
        if not found:
            raise StoreError(f"no investigation {incident_id}", path=self.path)
