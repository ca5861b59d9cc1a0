"""The durable job queue: one job per incident, leased to the process running it.

A claim takes the oldest queued job, or a running one whose lease ran out (its owner stopped
renewing: killed, partitioned, hung), and leases it to the claimant; concurrent claimants on
PostgreSQL pass over each other's rows (``FOR UPDATE SKIP LOCKED``) instead of queueing behind
them. The owner renews its leases while it works (heartbeats). Every later change to a job is made
only by the owner that holds it (``WHERE owner = ? AND status = 'running'``, one statement): the
late answer of an owner whose lease was taken over changes nothing. A job tried ``max_attempts``
times is failed instead of claimed again, so a job that kills its worker cannot loop.

Lease times are seconds since the epoch by the claimant's clock: replicas' clocks are expected to
agree (NTP) to well within a lease.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from opsagent.redaction import scrub, scrub_model
from opsagent.store.investigations import save_investigation
from opsagent.store.lessons import count_use, upsert_lessons
from opsagent.store.outbox import enqueue
from opsagent.store.records import (
    INCIDENT_COLUMNS,
    ClaimedJob,
    FinishedReport,
    IncidentRecord,
    JobOutcome,
    incident_of,
    instant,
)
from opsagent.store.sql import Tx, marks

#: Most later notifications of an incident a job reads with it (an alert storm's other alerts).
JOINED_NOTIFICATIONS = 32


async def claim_job(
    tx: Tx, *, owner: str, now: float, lease_s: float, max_attempts: int, sinks: Sequence[str] = ()
) -> ClaimedJob | None:
    """Lease the oldest queued job (or one whose lease ran out) to ``owner``; a job tried
    ``max_attempts`` times is failed instead, and its failure owed to ``sinks``."""
    stamp = instant(datetime.fromtimestamp(now, UTC))
    while True:
        row = (
            await tx.execute(
                "SELECT j.id, j.incident_id, j.attempts, n.payload, n.id FROM jobs j JOIN notifications n"
                " ON n.id = j.notification_id WHERE j.status = 'queued' OR (j.status = 'running'"
                f" AND j.lease_until < ?) ORDER BY j.id LIMIT 1{tx.dialect.skip_locked.format(alias='j')}",
                (now,),
            )
        ).one()
        if row is None:
            return None
        job_id, incident_id, attempts, payload, opened_by = row
        if attempts >= max_attempts:
            error = f"gave up after {attempts} attempt(s): the worker died or timed out each time"
            await _end_job(tx, job_id, incident_id, status="failed", error=error, stamp=stamp)
            await enqueue(tx, [(incident_id, "investigated")], sinks, now=now)
            continue
        await tx.execute(
            "UPDATE jobs SET status = 'running', owner = ?, lease_until = ?, attempts = attempts + 1,"
            " updated_at = ? WHERE id = ?",
            (owner, now + lease_s, stamp, job_id),
        )
        await tx.execute(
            "UPDATE incidents SET investigation = 'running', updated_at = ? WHERE id = ?", (stamp, incident_id)
        )
        later = await tx.execute(
            "SELECT payload FROM notifications WHERE incident_id = ? AND id > ? AND status = 'firing'"
            f" ORDER BY id LIMIT {JOINED_NOTIFICATIONS}",
            (incident_id, opened_by),
        )
        return ClaimedJob(
            id=job_id,
            incident_id=incident_id,
            attempts=attempts + 1,
            payload=payload,
            joined=[text for (text,) in later.rows],
        )


async def renew_leases(tx: Tx, job_ids: Sequence[int], *, owner: str, until: float) -> None:
    await tx.executemany(
        "UPDATE jobs SET lease_until = ? WHERE id = ? AND owner = ? AND status = 'running'",
        [(until, job_id, owner) for job_id in sorted(job_ids)],
    )


async def requeue_orphans(tx: Tx, is_orphan: Callable[[str], bool]) -> list[int]:
    """Running jobs whose owner is gone (a process killed between accept and completion) go back to
    the queue at once, rather than when their lease runs out."""
    rows = await tx.execute(
        f"SELECT id, incident_id, owner FROM jobs WHERE status = 'running' ORDER BY id{tx.dialect.for_update}"
    )
    orphans = [(job_id, incident_id) for job_id, incident_id, owner in rows.rows if is_orphan(owner or "")]
    for job_id, incident_id in orphans:
        await tx.execute("UPDATE jobs SET status = 'queued', owner = NULL, lease_until = NULL WHERE id = ?", (job_id,))
        await tx.execute("UPDATE incidents SET investigation = 'queued' WHERE id = ?", (incident_id,))
    return [job_id for job_id, _ in orphans]


async def release_job(tx: Tx, job_id: int, *, owner: str, error: str, attempt: bool = True) -> None:
    """Give a running job back to the queue: after a failure worth retrying (the attempt counts), or
    because the process is stopping (``attempt=False``: it does not)."""
    error = scrub(error)
    row = (
        await tx.execute(
            "UPDATE jobs SET status = 'queued', owner = NULL, lease_until = NULL, error = ?,"
            " attempts = attempts - ? WHERE id = ? AND owner = ? AND status = 'running' RETURNING incident_id",
            (error, 0 if attempt else 1, job_id, owner),
        )
    ).one()
    if row is not None:
        await tx.execute("UPDATE incidents SET investigation = 'queued', error = ? WHERE id = ?", (error, row[0]))
        if tx.dialect.jobs_queued:  # another worker may take it now
            await tx.execute(tx.dialect.jobs_queued)


async def release_jobs(tx: Tx, job_ids: Sequence[int], *, owner: str, error: str) -> None:
    for job_id in sorted(job_ids):
        await release_job(tx, job_id, owner=owner, error=error, attempt=False)


async def finish_job(
    tx: Tx,
    job_id: int,
    *,
    owner: str,
    now: datetime,
    outcome: JobOutcome | None = None,
    report: FinishedReport | None = None,
    error: str | None = None,
    sinks: Sequence[str] = (),
) -> IncidentRecord | None:
    """Record how a job ended, in this transaction: its outcome on the incident, its report, the
    lessons it used and taught, and the notification it owes ``sinks`` (the outbox); or the error
    that failed it. A job this owner no longer holds (its lease ran out and another took it) is left
    alone: None."""
    error = scrub(error) if error is not None else None
    outcome = scrub_model(outcome) if outcome is not None else None
    stamp = instant(now)
    status = "failed" if outcome is None else "done"
    failure = (error or "failed") if outcome is None else None
    ended = (
        await tx.execute(
            "UPDATE jobs SET status = ?, error = ?, lease_until = NULL, updated_at = ?"
            " WHERE id = ? AND owner = ? AND status = 'running' RETURNING incident_id",
            (status, failure, stamp, job_id, owner),
        )
    ).one()
    if ended is None:
        return None
    incident_id = ended[0]
    await _end_incident(tx, incident_id, status=status, error=failure, stamp=stamp)
    if outcome is not None:
        if report is not None:
            await save_investigation(tx, incident_id, report)
            await count_use(tx, report.lessons_used)
            await upsert_lessons(tx, report.lessons)
        await tx.execute(
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
    await enqueue(tx, [(incident_id, "investigated")], sinks, now=now.timestamp())
    found = (await tx.execute(f"SELECT {INCIDENT_COLUMNS} FROM incidents WHERE id = ?", (incident_id,))).one()
    return incident_of(found) if found is not None else None


async def _end_job(tx: Tx, job_id: int, incident_id: str, *, status: str, error: str | None, stamp: str) -> None:
    await tx.execute(
        "UPDATE jobs SET status = ?, error = ?, lease_until = NULL, updated_at = ? WHERE id = ?",
        (status, error, stamp, job_id),
    )
    await _end_incident(tx, incident_id, status=status, error=error, stamp=stamp)


async def _end_incident(tx: Tx, incident_id: str, *, status: str, error: str | None, stamp: str) -> None:
    await tx.execute(
        "UPDATE incidents SET investigation = ?, error = ?, outcome = CASE WHEN ? = 'failed' THEN 'failed'"
        " ELSE outcome END, updated_at = ? WHERE id = ?",
        (status, error, status, stamp, incident_id),
    )


async def job_counts(tx: Tx, states: Sequence[str] = ("queued", "running", "done", "failed")) -> dict[str, int]:
    """Jobs by state. Asked for the pending ones only (the queue's depth), it reads just those
    entries of the ``(status, id)`` index, however many jobs have finished."""
    rows = await tx.execute(
        f"SELECT status, COUNT(*) FROM jobs WHERE status IN ({marks(len(states))}) GROUP BY status", tuple(states)
    )
    counts = dict.fromkeys(states, 0)
    counts.update({status: int(n) for status, n in rows.rows})
    return counts
