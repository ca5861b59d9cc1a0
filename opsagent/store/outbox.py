"""The notification outbox: what the service owes the on-call engineer's sinks, kept in the store.

A row per notification and sink is written in the very transaction that changes the incident
(its investigation ended, its alert group resolved), so a notification exists exactly when the
change does: a crash before the commit loses both, after it neither. Its key — the incident and
what changed, ``inc-…:investigated`` — is the same wherever and however often the row is
written (one row per key and sink: a unique index), and it is the idempotency key the sink
receives.

A sender claims a due row (``pending`` and its next try come, or ``sending`` under a lease that ran
out: its sender died mid-post), posts it once, and records how that went: ``done`` (never sent
again), another try later (attempts and the time of the next try kept here, so backoff survives a
restart), or ``failed``. A claim is one conditional UPDATE of a row still due, so two senders never
hold one row; on PostgreSQL the candidate is read ``FOR UPDATE SKIP LOCKED``, so concurrent senders
pass over each other's rows instead of queueing behind them. A later row of the same incident and
sink waits until the earlier ones are over, so that a Slack thread starts with the first message and
the rest reply in it (``thread``: the first post's ``ts``).

Times are seconds since the epoch by the sender's clock, as the job queue's leases.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel

from opsagent.redaction import scrub
from opsagent.store.records import instant
from opsagent.store.sql import Tx

OutboxEvent = Literal["investigated", "resolved"]


class OutboxItem(BaseModel):
    """A notification claimed for sending."""

    id: int
    incident_id: str
    event: OutboxEvent
    sink: str
    key: str
    attempts: int
    #: the ``ts`` of the first post about this incident to this sink, when it said one (Slack)
    thread: str | None = None


def notification_key(incident_id: str, event: OutboxEvent) -> str:
    return f"{incident_id}:{event}"


async def enqueue(tx: Tx, changed: Sequence[tuple[str, OutboxEvent]], sinks: Sequence[str], *, now: float) -> None:
    """Owe each sink a notification of each ``(incident, event)``: written once, whoever writes it
    again (a job finished twice by two owners, a resolution replayed)."""
    if not changed or not sinks:
        return
    stamp = instant(datetime.fromtimestamp(now, UTC))
    await tx.executemany(
        "INSERT INTO outbox (incident_id, event, sink, notify_key, status, next_try, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, 'pending', ?, ?, ?) ON CONFLICT (notify_key, sink) DO NOTHING",
        [
            (incident_id, event, sink, notification_key(incident_id, event), now, stamp, stamp)
            for incident_id, event in changed
            for sink in sinks
        ],
    )


_DUE = (
    "((o.status = 'pending' AND o.next_try <= ?) OR (o.status = 'sending' AND o.lease_until < ?))"
    " AND NOT EXISTS (SELECT 1 FROM outbox p WHERE p.incident_id = o.incident_id AND p.sink = o.sink"
    " AND p.id < o.id AND p.status IN ('pending', 'sending'))"
)


async def claim(
    tx: Tx, *, owner: str, now: float, lease_s: float, max_attempts: int, sinks: Sequence[str]
) -> OutboxItem | None:
    """Lease the notification due first to ``owner`` (one of ``sinks``: a sender claims only what
    it can send), or None. A row whose sender died holding it after its last attempt is failed."""
    if not sinks:
        return None
    stamp = instant(datetime.fromtimestamp(now, UTC))
    marks = ",".join("?" * len(sinks))
    while True:
        row = (
            await tx.execute(
                "SELECT o.id, o.incident_id, o.event, o.sink, o.notify_key, o.attempts, o.status FROM outbox o"
                f" WHERE {_DUE}"
                f" AND o.sink IN ({marks}) ORDER BY o.next_try, o.id LIMIT 1{tx.dialect.skip_locked.format(alias='o')}",
                (now, now, *sinks),
            )
        ).one()
        if row is None:
            return None
        item_id, incident_id, event, sink, key, attempts, seen = row
        if attempts >= max_attempts:
            await tx.execute(
                "UPDATE outbox SET status = 'failed', owner = NULL, lease_until = NULL, updated_at = ?,"
                " error = COALESCE(error, 'the sender stopped during its last attempt') WHERE id = ?",
                (stamp, item_id),
            )
            continue
        # the claim holds only if the row is as it was read: a sender that claimed it meanwhile
        # changed its status or its attempts
        taken = await tx.execute(
            "UPDATE outbox SET status = 'sending', owner = ?, lease_until = ?, attempts = attempts + 1,"
            " updated_at = ? WHERE id = ? AND status = ? AND attempts = ?",
            (owner, now + lease_s, stamp, item_id, seen, attempts),
        )
        if taken.rowcount != 1:  # another sender took it between the read and the claim
            continue
        thread = (
            await tx.execute(
                "SELECT thread FROM outbox WHERE incident_id = ? AND sink = ? AND thread IS NOT NULL"
                " ORDER BY id LIMIT 1",
                (incident_id, sink),
            )
        ).one()
        return OutboxItem(
            id=item_id,
            incident_id=incident_id,
            event=event,
            sink=sink,
            key=key,
            attempts=attempts + 1,
            thread=thread[0] if thread else None,
        )


async def settle(
    tx: Tx,
    item_id: int,
    *,
    owner: str,
    now: float,
    status: Literal["done", "pending", "failed"],
    next_try: float | None = None,
    thread: str | None = None,
    error: str | None = None,
) -> bool:
    """Record how ``owner``'s attempt went: ``done`` (with the post's ``thread`` when it has one),
    ``pending`` again from ``next_try``, or ``failed``. A row this owner no longer holds (its lease
    ran out and another sender took it) is left alone: False."""
    changed = await tx.execute(
        "UPDATE outbox SET status = ?, next_try = COALESCE(?, next_try), thread = COALESCE(?, thread),"
        " error = ?, owner = NULL, lease_until = NULL, updated_at = ?"
        " WHERE id = ? AND owner = ? AND status = 'sending'",
        (
            status,
            next_try,
            thread,
            scrub(error) if error is not None else None,
            instant(datetime.fromtimestamp(now, UTC)),
            item_id,
            owner,
        ),
    )
    return changed.rowcount == 1


async def release_orphans(tx: Tx, is_orphan: Callable[[str], bool], *, now: float) -> int:
    """Notifications held by a sender that is gone (a process of this host killed mid-post) are due
    again at once, rather than when their lease runs out; the attempt it made still counts."""
    held = await tx.execute(f"SELECT id, owner FROM outbox WHERE status = 'sending' ORDER BY id{tx.dialect.for_update}")
    orphans = [item_id for item_id, owner in held.rows if is_orphan(owner or "")]
    await tx.executemany(
        "UPDATE outbox SET status = 'pending', owner = NULL, lease_until = NULL, next_try = ? WHERE id = ?",
        [(now, item_id) for item_id in orphans],
    )
    return len(orphans)


async def counts(tx: Tx) -> dict[str, int]:
    """Notifications by status (pending, sending, done, failed)."""
    rows = await tx.execute("SELECT status, COUNT(*) FROM outbox GROUP BY status")
    found = dict.fromkeys(("pending", "sending", "done", "failed"), 0)
    found.update({status: int(n) for status, n in rows.rows})
    return found


class OutboxRow(BaseModel):
    key: str
    sink: str
    status: str
    attempts: int
    thread: str | None
    error: str | None


async def rows(tx: Tx, incident_id: str | None = None) -> list[OutboxRow]:
    """The outbox's rows (of one incident), in the order they were written."""
    where, args = (" WHERE incident_id = ?", (incident_id,)) if incident_id is not None else ("", ())
    found = await tx.execute(
        f"SELECT notify_key, sink, status, attempts, thread, error FROM outbox{where} ORDER BY id", args
    )
    return [OutboxRow(key=k, sink=s, status=st, attempts=a, thread=t, error=e) for k, s, st, a, t, e in found.rows]
