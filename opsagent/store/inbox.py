"""Accepting webhook notifications: deduplicated by alert group, one transaction per batch.

A group with an open incident updates it (``resolved`` resolves it); a firing group without one
opens an incident and queues its job. Whichever replica a notification reaches, the database holds
the rule: at most one open incident per group (a partial unique index) and one job per incident (a
unique index). Concurrent batches of several replicas take a transaction-level lock per group they
touch, in one global order, first: the second batch to reach a group waits for the first to commit
and then sees its incident (an update, not a second incident, and no deadlock between batches).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal

from opsagent.redaction import redactors
from opsagent.store.records import Accepted, NotificationIn, instant, maybe_instant, new_episode, redacted
from opsagent.store.sql import Tx, marks

Action = Literal["opened", "updated", "resolved", "ignored"]

PROBE_GROUP = "opsagent:readiness-probe"


def group_lock(group_key: str) -> int:
    """A 64-bit lock key for an alert group, the same in every replica."""
    return int.from_bytes(hashlib.blake2b(group_key.encode(), digest_size=8).digest(), "big", signed=True)


async def accept(tx: Tx, notifications: Sequence[NotificationIn]) -> list[Accepted]:
    """Persist notifications (redacted) in this transaction, in arrival order."""
    chain = redactors()  # once a batch: the secrets to mask are this process's, read from its environment
    notes = [redacted(n, chain) for n in notifications]
    groups = sorted({n.group_key for n in notes})
    await tx.lock(sorted({group_lock(g) for g in groups}))
    found = await tx.execute(
        "SELECT group_key, id, alerts_started FROM incidents WHERE resolved_at IS NULL"
        f" AND group_key IN ({marks(len(groups))})",
        groups,
    )
    open_incidents: dict[str, tuple[str, str | None]] = {g: (i, s) for g, i, s in found.rows}
    out: list[Accepted] = []
    for n in notes:
        when = instant(n.received_at)
        incident_id, seen_started = open_incidents.get(n.group_key, (None, None))
        started = maybe_instant(n.last_started)
        if incident_id is not None and new_episode(seen_started, n):
            await tx.execute(
                "UPDATE incidents SET state = 'resolved', resolved_at = ?, updated_at = ? WHERE id = ?",
                (when, when, incident_id),
            )
            incident_id = None  # its end was never heard: this firing opens an incident of its own
        action: Action
        if incident_id is None:
            action = "ignored" if n.status == "resolved" else "opened"
        else:
            action = "resolved" if n.status == "resolved" else "updated"
        job_id = None
        if action == "opened":
            digest = hashlib.sha1(f"{n.group_key}|{when}|{secrets.token_hex(8)}".encode()).hexdigest()[:12]
            incident_id = f"inc-{digest}"
            await tx.execute(
                "INSERT INTO incidents (id, group_key, state, investigation, service, alertname, title,"
                " receiver, created_at, updated_at, alerts_started)"
                " VALUES (?, ?, 'firing', 'queued', ?, ?, ?, ?, ?, ?, ?)",
                (incident_id, n.group_key, n.service, n.alertname, n.title, n.receiver, when, when, started),
            )
        row = (
            await tx.execute(
                "INSERT INTO notifications (incident_id, group_key, status, action, received_at, payload)"
                " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                (incident_id, n.group_key, n.status, action, when, n.payload),
            )
        ).one()
        notification_id = int(row[0]) if row else 0
        if action == "opened":
            job = (
                await tx.execute(
                    "INSERT INTO jobs (incident_id, notification_id, status, created_at, updated_at)"
                    " VALUES (?, ?, 'queued', ?, ?) RETURNING id",
                    (incident_id, notification_id, when, when),
                )
            ).one()
            job_id = int(job[0]) if job else None
            open_incidents[n.group_key] = (incident_id or "", started)
        elif action in ("updated", "resolved"):
            # the latest start the incident has seen (fixed-width UTC stamps: text order is time order)
            latest = max((t for t in (seen_started, started) if t is not None), default=None)
            await tx.execute(
                "UPDATE incidents SET notifications = notifications + 1, updated_at = ?,"
                " state = CASE WHEN ? = 'resolved' THEN 'resolved' ELSE state END,"
                " resolved_at = CASE WHEN ? = 'resolved' THEN ? ELSE resolved_at END,"
                " alerts_started = ? WHERE id = ?",
                (when, action, action, when, latest, incident_id),
            )
            if action == "resolved":
                open_incidents.pop(n.group_key, None)
            else:
                open_incidents[n.group_key] = (incident_id or "", latest)
        out.append(Accepted(notification_id=notification_id, incident_id=incident_id, action=action, job_id=job_id))
    return out


def probe() -> NotificationIn:
    """The notification readiness writes (and rolls back): the accept path, end to end."""
    return NotificationIn(
        group_key=PROBE_GROUP,
        status="firing",
        receiver="-",
        service="-",
        alertname="-",
        title="-",
        payload="{}",
        received_at=datetime.now(UTC),
    )
