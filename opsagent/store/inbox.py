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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from opsagent.redaction import redactors
from opsagent.store.outbox import OutboxEvent, enqueue
from opsagent.store.records import Accepted, NotificationIn, instant, maybe_instant, new_episode, redacted
from opsagent.store.sql import Tx, marks

Action = Literal["opened", "updated", "resolved", "ignored"]

PROBE_GROUP = "opsagent:readiness-probe"


def group_lock(group_key: str) -> int:
    """A 64-bit lock key for an alert group, the same in every replica."""
    return int.from_bytes(hashlib.blake2b(group_key.encode(), digest_size=8).digest(), "big", signed=True)


@dataclass
class _Incident:
    """An incident as the batch leaves it: one opened by the batch is inserted so; one that was
    open before it is updated by what the batch did to it."""

    id: str
    started: str | None  # the latest start of its alerts seen
    opened_by: NotificationIn | None = None  # opened by this batch
    created_at: str = ""
    updated_at: str = ""
    added: int = 0  # notifications this batch added
    resolved_at: str | None = None


async def accept(tx: Tx, notifications: Sequence[NotificationIn], sinks: Sequence[str] = ()) -> list[Accepted]:
    """Persist notifications (redacted) in this transaction, in arrival order. The batch is decided
    in memory from the groups' open incidents, read once, then written in a few statements whatever
    its size (psycopg sends each ``executemany`` in one round trip). Each incident it resolves owes
    ``sinks`` a notification (the outbox), written here too."""
    if not notifications:
        return []
    chain = redactors()  # once a batch: the secrets to mask are this process's, read from its environment
    notes = [redacted(n, chain) for n in notifications]
    groups = sorted({n.group_key for n in notes})
    await tx.lock(sorted({group_lock(g) for g in groups}))
    found = await tx.execute(
        "SELECT group_key, id, alerts_started FROM incidents WHERE resolved_at IS NULL"
        f" AND group_key IN ({marks(len(groups))})",
        groups,
    )
    open_now: dict[str, _Incident] = {g: _Incident(id=i, started=s) for g, i, s in found.rows}
    touched: dict[str, _Incident] = {}  # every incident the batch changes, in first-touched order
    decided: list[tuple[NotificationIn, Action, _Incident | None]] = []
    for n in notes:
        when = instant(n.received_at)
        incident = open_now.get(n.group_key)
        started = maybe_instant(n.last_started)
        if incident is not None and new_episode(incident.started, n):
            # its end was never heard: this firing opens an incident of its own
            incident.resolved_at = incident.updated_at = when
            touched.setdefault(incident.id, incident)
            del open_now[n.group_key]
            incident = None
        action: Action
        if incident is None:
            action = "ignored" if n.status == "resolved" else "opened"
        else:
            action = "resolved" if n.status == "resolved" else "updated"
        if action == "opened":
            digest = hashlib.sha1(f"{n.group_key}|{when}|{secrets.token_hex(8)}".encode()).hexdigest()[:12]
            incident = _Incident(id=f"inc-{digest}", started=started, opened_by=n, created_at=when, updated_at=when)
            open_now[n.group_key] = touched[incident.id] = incident
        elif incident is not None:  # updated or resolved
            # the latest start the incident has seen (fixed-width UTC stamps: text order is time order)
            incident.started = max((t for t in (incident.started, started) if t is not None), default=None)
            incident.added += 1
            incident.updated_at = when
            touched.setdefault(incident.id, incident)
            if action == "resolved":
                incident.resolved_at = when
                del open_now[n.group_key]
        decided.append((n, action, incident))

    # incidents that were open before: updated first (a resolution frees its group for one opened after it)
    await tx.executemany(
        "UPDATE incidents SET notifications = notifications + ?, updated_at = ?,"
        " state = CASE WHEN CAST(? AS TEXT) IS NULL THEN state ELSE 'resolved' END,"
        " resolved_at = COALESCE(?, resolved_at),"
        " alerts_started = ? WHERE id = ?",
        [
            (i.added, i.updated_at, i.resolved_at, i.resolved_at, i.started, i.id)
            for i in touched.values()
            if i.opened_by is None
        ],
    )
    await tx.executemany(
        "INSERT INTO incidents (id, group_key, state, investigation, service, alertname, title, receiver,"
        " created_at, updated_at, resolved_at, notifications, alerts_started)"
        " VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                i.id,
                o.group_key,
                "firing" if i.resolved_at is None else "resolved",
                o.service,
                o.alertname,
                o.title,
                o.receiver,
                i.created_at,
                i.updated_at,
                i.resolved_at,
                1 + i.added,
                i.started,
            )
            for i in touched.values()
            if (o := i.opened_by) is not None
        ],
    )
    ids = await tx.insert_many(
        "INSERT INTO notifications (incident_id, group_key, status, action, received_at, payload)"
        " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
        [
            (i.id if i else None, n.group_key, n.status, action, instant(n.received_at), n.payload)
            for n, action, i in decided
        ],
    )
    opened = [(k, i) for k, (_, action, i) in enumerate(decided) if action == "opened" and i is not None]
    job_ids = await tx.insert_many(
        "INSERT INTO jobs (incident_id, notification_id, status, created_at, updated_at)"
        " VALUES (?, ?, 'queued', ?, ?) RETURNING id",
        [(i.id, ids[k], i.created_at, i.created_at) for k, i in opened],
    )
    jobs = dict(zip((k for k, _ in opened), job_ids, strict=True))
    resolved: list[tuple[str, OutboxEvent]] = [(i.id, "resolved") for i in touched.values() if i.resolved_at]
    if resolved and sinks:
        now = max(n.received_at for n in notes).timestamp()
        await enqueue(tx, resolved, sinks, now=now)
    if job_ids and tx.dialect.jobs_queued:
        await tx.execute(tx.dialect.jobs_queued)
    return [
        Accepted(notification_id=ids[k], incident_id=i.id if i else None, action=action, job_id=jobs.get(k))
        for k, (_, action, i) in enumerate(decided)
    ]


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
