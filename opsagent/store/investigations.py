"""Investigation records: a report as stored (redacted, serialised once), the lessons it used, and
the on-call engineer's verdict on it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from opsagent.models import Report
from opsagent.store.errors import Unreadable
from opsagent.store.records import (
    INCIDENT_COLUMNS,
    FinishedReport,
    IncidentRecord,
    InvestigationRecord,
    incident_of,
    now,
)
from opsagent.store.sql import Tx


async def save_investigation(tx: Tx, incident_id: str, finished: FinishedReport) -> None:
    """Stores a report; one that replaces an earlier report of the incident drops its verdict, which
    was about the earlier one."""
    await tx.execute(
        "INSERT INTO investigations (incident_id, created_at, status, root_component, root_kind, report,"
        " lessons_used) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (incident_id) DO UPDATE SET"
        " created_at = excluded.created_at, status = excluded.status, root_component = excluded.root_component,"
        " root_kind = excluded.root_kind, report = excluded.report, lessons_used = excluded.lessons_used,"
        " feedback = NULL, feedback_root_cause = NULL",
        (
            incident_id,
            now(),
            finished.status,
            finished.root_component,
            finished.root_kind,
            finished.report,
            json.dumps(finished.lessons_used),
        ),
    )


#: An investigation's row; the report comes last, for its title (read in Python: the SQL is the same
#: on both backends).
_COLUMNS = (
    "incident_id, created_at, status, root_component, root_kind, lessons_used, feedback, feedback_root_cause, report"
)


async def investigation(tx: Tx, incident_id: str) -> InvestigationRecord | None:
    row = (await tx.execute(f"SELECT {_COLUMNS} FROM investigations WHERE incident_id = ?", (incident_id,))).one()
    return None if row is None else _record(row)


async def investigations(tx: Tx, limit: int = 50) -> list[InvestigationRecord]:
    """Recorded investigations, most recent first."""
    rows = await tx.execute(
        f"SELECT {_COLUMNS} FROM investigations ORDER BY created_at DESC, incident_id LIMIT ?", (limit,)
    )
    return [_record(row) for row in rows.rows]


def _title(report: str) -> str | None:
    try:
        title = json.loads(report).get("incident", {}).get("title")
    except (ValueError, AttributeError):
        return None
    return title if isinstance(title, str) else None


def _record(row: Sequence[Any]) -> InvestigationRecord:
    try:
        return InvestigationRecord(
            incident_id=row[0],
            created_at=row[1],
            status=row[2],
            root_component=row[3],
            root_kind=row[4],
            lessons_used=json.loads(row[5]),
            feedback=row[6],
            feedback_root_cause=row[7],
            title=_title(row[8]),
        )
    except (ValidationError, ValueError) as exc:
        raise Unreadable(f"a stored investigation cannot be read ({str(exc).splitlines()[0]})") from exc


async def report(tx: Tx, incident_id: str) -> Report | None:
    row = (await tx.execute("SELECT report FROM investigations WHERE incident_id = ?", (incident_id,))).one()
    if row is None:
        return None
    try:
        return Report.model_validate_json(row[0])
    except ValidationError as exc:
        raise Unreadable(f"a stored report cannot be read ({str(exc).splitlines()[0]})") from exc


async def record_feedback(tx: Tx, incident_id: str, *, correct: bool, root_cause: str | None) -> bool:
    found = await tx.execute(
        "UPDATE investigations SET feedback = ?, feedback_root_cause = ? WHERE incident_id = ?",
        ("correct" if correct else "wrong", root_cause, incident_id),
    )
    return found.rowcount > 0


async def incident_with_report(tx: Tx, incident_id: str) -> tuple[IncidentRecord | None, Report | None, str]:
    """An incident, its report once there is one, and its charts (JSON): what a report page shows,
    read in one transaction."""
    row = (await tx.execute(f"SELECT {INCIDENT_COLUMNS}, charts FROM incidents WHERE id = ?", (incident_id,))).one()
    if row is None:
        return None, None, "[]"
    return incident_of(row[:-1]), await report(tx, incident_id), row[-1]
