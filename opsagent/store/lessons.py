"""Lessons: stored redacted, merged with a near-duplicate (same id), counted as they are used.

A merge reads the stored lesson and writes the merged one: the row is locked between the two
(``FOR UPDATE``), so two replicas teaching or correcting the same lesson at once both count. Counters
are incremented in SQL, never read and written back. Rows are locked in id order, so two
transactions touching the same lessons cannot deadlock.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from opsagent.lessons import LessonCounter, merge
from opsagent.models import Lesson
from opsagent.redaction import scrub_model
from opsagent.store.errors import Unreadable
from opsagent.store.records import LESSON_COLUMNS, instant, now
from opsagent.store.sql import Row, Tx

COUNTERS: dict[LessonCounter, str] = {c: f"times_{c}" for c in ("retrieved", "helped", "misled")}


def lesson_of(row: Row) -> Lesson:
    body, count, retrieved, helped, misled = row
    try:
        lesson = Lesson.model_validate_json(body)
    except ValidationError as exc:
        raise Unreadable(f"a stored lesson does not validate: {exc}") from exc
    counts = {"count": count, "times_retrieved": retrieved, "times_helped": helped, "times_misled": misled}
    return lesson.model_copy(update=counts)


async def upsert_lesson(tx: Tx, lesson: Lesson) -> tuple[Lesson, bool]:
    """Store a lesson; a near-duplicate (same id) is merged into the one stored. Returns it and
    whether it was merged."""
    lesson = scrub_model(lesson)
    stamp = now()
    inserted = await tx.execute(
        "INSERT INTO lessons (id, refuted_kind, body, count, times_retrieved, times_helped, times_misled,"
        " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING RETURNING id",
        (
            lesson.id,
            lesson.refuted_kind,
            lesson.model_dump_json(),
            lesson.count,
            lesson.times_retrieved,
            lesson.times_helped,
            lesson.times_misled,
            instant(lesson.created_at),
            stamp,
        ),
    )
    if inserted.rows:
        return lesson, False
    row = (
        await tx.execute(f"SELECT {LESSON_COLUMNS} FROM lessons WHERE id = ?{tx.dialect.for_update}", (lesson.id,))
    ).one()
    if row is None:  # deleted between the two statements: gone, as the deleter wanted
        return lesson, False
    merged = merge(lesson_of(row), lesson)
    await tx.execute(
        "UPDATE lessons SET body = ?, count = ?, updated_at = ? WHERE id = ?",
        (merged.model_dump_json(), merged.count, stamp, lesson.id),
    )
    return merged, True


async def upsert_lessons(tx: Tx, lessons: Sequence[Lesson]) -> None:
    for lesson in sorted(lessons, key=lambda le: le.id):
        await upsert_lesson(tx, lesson)


async def replace_lesson(tx: Tx, lesson: Lesson) -> bool:
    """A person's edit of a lesson; False when there is no such lesson."""
    lesson = scrub_model(lesson)
    found = await tx.execute(
        "UPDATE lessons SET body = ?, refuted_kind = ?, updated_at = ? WHERE id = ?",
        (lesson.model_dump_json(), lesson.refuted_kind, now(), lesson.id),
    )
    return found.rowcount > 0


async def lessons(tx: Tx) -> list[Lesson]:
    rows = await tx.execute(f"SELECT {LESSON_COLUMNS} FROM lessons ORDER BY created_at DESC, id")
    return [lesson_of(r) for r in rows.rows]


async def lesson(tx: Tx, lesson_id: str) -> Lesson | None:
    row = (await tx.execute(f"SELECT {LESSON_COLUMNS} FROM lessons WHERE id = ?", (lesson_id,))).one()
    return None if row is None else lesson_of(row)


async def delete_lesson(tx: Tx, lesson_id: str) -> bool:
    return (await tx.execute("DELETE FROM lessons WHERE id = ?", (lesson_id,))).rowcount > 0


async def count_use(tx: Tx, lesson_ids: Sequence[str], counter: LessonCounter = "retrieved") -> None:
    column = COUNTERS[counter]
    if lesson_ids:
        await tx.executemany(
            f"UPDATE lessons SET {column} = {column} + 1 WHERE id = ?", [(i,) for i in sorted(lesson_ids)]
        )
