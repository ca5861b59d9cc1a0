"""Incidents as the service lists them, and retention: what is old and finished is deleted with its
trail, a batch per transaction."""

from __future__ import annotations

from datetime import datetime

from opsagent.store.inbox import group_lock
from opsagent.store.records import (
    INCIDENT_COLUMNS,
    IncidentRecord,
    IncidentState,
    InvestigationState,
    incident_of,
    instant,
)
from opsagent.store.sql import Tx, marks


async def incidents(
    tx: Tx,
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
    rows = await tx.execute(
        f"SELECT {INCIDENT_COLUMNS} FROM incidents{clause} ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
        (*args, limit, offset),
    )
    return [incident_of(r) for r in rows.rows]


async def incident(tx: Tx, incident_id: str) -> IncidentRecord | None:
    row = (await tx.execute(f"SELECT {INCIDENT_COLUMNS} FROM incidents WHERE id = ?", (incident_id,))).one()
    return incident_of(row) if row is not None else None


async def incident_charts(tx: Tx, incident_id: str) -> str:
    row = (await tx.execute("SELECT charts FROM incidents WHERE id = ?", (incident_id,))).one()
    return str(row[0]) if row is not None else "[]"


async def has_report(tx: Tx, incident_id: str) -> bool:
    return (await tx.execute("SELECT 1 FROM investigations WHERE incident_id = ?", (incident_id,))).one() is not None


async def notification_count(tx: Tx) -> int:
    row = (await tx.execute("SELECT COUNT(*) FROM notifications")).one()
    return int(row[0]) if row else 0


async def prune(tx: Tx, *, before: datetime, batch: int = 500) -> int:
    """Delete up to ``batch`` incidents untouched since ``before`` whose investigation is over, with
    their notifications (received and owed), job and report, and the ignored notifications received
    before it; lessons stay. Returns how many incidents went (call again while it returns ``batch``)."""
    cutoff = instant(before)
    old = "updated_at < ? AND investigation IN ('done', 'failed')"
    groups = await tx.execute(f"SELECT group_key FROM incidents WHERE {old} ORDER BY id LIMIT ?", (cutoff, batch))
    keys = sorted({row[0] for row in groups.rows})
    ids: list[str] = []
    if keys:  # a notification for one of these groups arriving now waits, then finds it gone (or kept)
        await tx.lock(sorted({group_lock(k) for k in keys}))
        rows = await tx.execute(
            f"SELECT id FROM incidents WHERE {old} AND group_key IN ({marks(len(keys))}) ORDER BY id LIMIT ?",
            (cutoff, *keys, batch),
        )
        ids = [row[0] for row in rows.rows]
    if ids:
        for table, column in (
            ("notifications", "incident_id"),
            ("outbox", "incident_id"),
            ("jobs", "incident_id"),
            ("investigations", "incident_id"),
            ("incidents", "id"),
        ):
            await tx.execute(f"DELETE FROM {table} WHERE {column} IN ({marks(len(ids))})", ids)
    await tx.execute(
        "DELETE FROM notifications WHERE id IN (SELECT id FROM notifications"
        " WHERE incident_id IS NULL AND received_at < ? LIMIT ?)",
        (cutoff, batch),
    )
    return len(ids)
