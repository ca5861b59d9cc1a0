"""The store as the webhook service and its workers use it: every call awaited, never blocking the
event loop.

Two backends behind one :class:`ServiceStore`:

- PostgreSQL: :class:`~opsagent.store.postgres.PostgresPool`, psycopg's async pool, shared by the
  accept path, the dispatcher and the pages.
- SQLite: :class:`ThreadedSqlite`, a writer connection on a thread of its own (every write, one at a
  time, in order) and a reader connection on another (pages, counts), which also copies the WAL
  into the database file every few seconds, off the path that answers webhooks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, Concatenate, Literal, ParamSpec, Protocol, TypeVar

import structlog

from opsagent.correlation import Correlator
from opsagent.models import Report
from opsagent.store import inbox, incidents, investigations, jobs, outbox, storms
from opsagent.store.errors import StoreError
from opsagent.store.location import StoreLocation
from opsagent.store.outbox import OutboxItem, OutboxRow
from opsagent.store.records import (
    Accepted,
    ClaimedJob,
    FinishedReport,
    IncidentRecord,
    IncidentState,
    InvestigationState,
    JobOutcome,
    NotificationIn,
)
from opsagent.store.sql import Tx
from opsagent.store.sqlite import SqliteDatabase
from opsagent.store.storms import Delivery, StormRow

log = structlog.get_logger("opsagent.store")

P = ParamSpec("P")
T = TypeVar("T")
Operation = Callable[Concatenate[Tx, P], Coroutine[Any, Any, T]]


class AsyncDatabase(Protocol):
    where: str
    #: write transactions worth having in flight at once
    concurrent_writes: int

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def write(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T: ...

    async def read(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T: ...

    async def probe(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T: ...

    async def listen(self, wake: Callable[[], None]) -> None: ...


class _Connection:
    """One SQLite connection on a thread of its own; calls run there one at a time, in order."""

    def __init__(self, location: StoreLocation, *, name: str) -> None:
        self.location = location
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._db: SqliteDatabase | None = None

    def _database(self) -> SqliteDatabase:
        if self._db is None:
            self._db = SqliteDatabase(self.location.path)
        return self._db

    async def call(self, fn: Callable[[SqliteDatabase], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, lambda: fn(self._database()))

    def close(self) -> None:
        def _close() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        self._executor.submit(_close)
        self._executor.shutdown(wait=True)


class ThreadedSqlite:
    """SQLite for the service: a writer and a reader connection, each on its own thread."""

    concurrent_writes = 1  # one writer: a second batch would only wait for the first

    def __init__(self, location: StoreLocation, *, checkpoint_s: float = 5.0) -> None:
        self.where = str(location)
        self.checkpoint_s = checkpoint_s
        self._writer = _Connection(location, name="store-writer")
        self._reader = _Connection(location, name="store-reader")
        self._checkpoints: asyncio.Task[None] | None = None
        self._trouble: str | None = None

    async def open(self) -> None:
        await self._writer.call(lambda db: db.defer_checkpoints())  # opens and migrates, or fails loudly
        self._checkpoints = asyncio.create_task(self._checkpoint(), name="store-checkpoint")

    async def close(self) -> None:
        if self._checkpoints is not None:
            self._checkpoints.cancel()
            await asyncio.wait([self._checkpoints], timeout=10)  # a checkpoint under way ends first
        self._writer.close()
        self._reader.close()

    async def _checkpoint(self) -> None:
        while True:
            await asyncio.sleep(self.checkpoint_s)
            try:
                await self._reader.call(lambda db: db.checkpoint())
                if self._trouble is not None:
                    log.info("store.checkpoint_recovered")
                    self._trouble = None
            except StoreError as exc:  # logged when it starts (or changes), not every tick
                if self._trouble != str(exc):
                    self._trouble = str(exc)
                    log.warning("store.checkpoint_failed", error=str(exc))

    async def listen(self, wake: Callable[[], None]) -> None:
        """No announcements across processes on SQLite: another process's dispatcher polls."""
        await asyncio.Event().wait()

    async def write(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._writer.call(lambda db: db.write(operation, *args, **kwargs))

    async def read(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._reader.call(lambda db: db.read(operation, *args, **kwargs))

    async def probe(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._writer.call(lambda db: db.probe(operation, *args, **kwargs))


class ServiceStore:
    """What the service asks of the store, awaited. ``sinks``: the notification sinks configured
    (``slack``, ``webhook``); every state change of an incident owes each of them a notification,
    written to the outbox in the transaction that makes the change."""

    def __init__(self, database: AsyncDatabase, *, sinks: Sequence[str] = ()) -> None:
        self._db = database
        self.where = database.where
        self.concurrent_writes = database.concurrent_writes
        self.sinks = tuple(sinks)

    @classmethod
    async def open(cls, location: StoreLocation, *, sinks: Sequence[str] = ()) -> ServiceStore:
        """The store at ``location``, connected and migrated; a StoreError when it cannot be."""
        if location.kind == "sqlite":
            database: AsyncDatabase = ThreadedSqlite(location)
        else:
            from opsagent.store.postgres import PostgresPool

            database = PostgresPool(location)
        await database.open()
        return cls(database, sinks=sinks)

    async def close(self) -> None:
        await self._db.close()

    async def listen(self, wake: Callable[[], None]) -> None:
        """Calls ``wake`` whenever a process queues jobs, until cancelled (PostgreSQL: LISTEN/NOTIFY)."""
        await self._db.listen(wake)

    # ------------------------------------------------------------ accepting

    async def accept(self, notifications: Sequence[NotificationIn]) -> list[Accepted]:
        return await self._db.write(inbox.accept, notifications, self.sinks)

    async def deliver(
        self, deliveries: Sequence[Delivery], correlator: Callable[[], Correlator] | None
    ) -> list[list[Accepted]]:
        """Accept notifications in one transaction, each split by alert storm when ``correlator``
        (a factory of empty correlators) is given (:mod:`opsagent.store.storms`)."""
        return await self._db.write(storms.deliver, deliveries, correlator, self.sinks)

    async def storms(self) -> list[StormRow]:
        """The alert storms held, least recently touched first."""
        return await self._db.read(storms.held)

    async def check_writable(self) -> None:
        await self._db.probe(inbox.accept, [inbox.probe()])

    # ------------------------------------------------------------ the queue

    async def claim_job(self, *, owner: str, now: float, lease_s: float, max_attempts: int) -> ClaimedJob | None:
        return await self._db.write(
            jobs.claim_job, owner=owner, now=now, lease_s=lease_s, max_attempts=max_attempts, sinks=self.sinks
        )

    async def renew_leases(self, job_ids: Sequence[int], *, owner: str, until: float) -> None:
        await self._db.write(jobs.renew_leases, job_ids, owner=owner, until=until)

    async def requeue_orphans(self, is_orphan: Callable[[str], bool]) -> list[int]:
        return await self._db.write(jobs.requeue_orphans, is_orphan)

    async def release_job(self, job_id: int, *, owner: str, error: str, attempt: bool = True) -> None:
        await self._db.write(jobs.release_job, job_id, owner=owner, error=error, attempt=attempt)

    async def release_jobs(self, job_ids: Sequence[int], *, owner: str, error: str) -> None:
        await self._db.write(jobs.release_jobs, job_ids, owner=owner, error=error)

    async def finish_job(
        self,
        job_id: int,
        *,
        owner: str,
        now: datetime,
        outcome: JobOutcome | None = None,
        report: FinishedReport | None = None,
        error: str | None = None,
    ) -> IncidentRecord | None:
        return await self._db.write(
            jobs.finish_job, job_id, owner=owner, now=now, outcome=outcome, report=report, error=error, sinks=self.sinks
        )

    async def job_counts(self, states: Sequence[str] = ("queued", "running", "done", "failed")) -> dict[str, int]:
        return await self._db.read(jobs.job_counts, states)

    async def prune(self, *, before: datetime, batch: int = 500) -> int:
        return await self._db.write(incidents.prune, before=before, batch=batch)

    # ------------------------------------------------------------ the outbox

    async def claim_notification(
        self, *, owner: str, now: float, lease_s: float, max_attempts: int, sinks: Sequence[str]
    ) -> OutboxItem | None:
        return await self._db.write(
            outbox.claim, owner=owner, now=now, lease_s=lease_s, max_attempts=max_attempts, sinks=sinks
        )

    async def settle_notification(
        self,
        item_id: int,
        *,
        owner: str,
        now: float,
        status: Literal["done", "pending", "failed"],
        next_try: float | None = None,
        thread: str | None = None,
        error: str | None = None,
    ) -> bool:
        return await self._db.write(
            outbox.settle,
            item_id,
            owner=owner,
            now=now,
            status=status,
            next_try=next_try,
            thread=thread,
            error=error,
        )

    async def release_orphaned_notifications(self, is_orphan: Callable[[str], bool], *, now: float) -> int:
        return await self._db.write(outbox.release_orphans, is_orphan, now=now)

    async def outbox_counts(self) -> dict[str, int]:
        return await self._db.read(outbox.counts)

    async def outbox_rows(self, incident_id: str | None = None) -> list[OutboxRow]:
        return await self._db.read(outbox.rows, incident_id)

    # ------------------------------------------------------------ reading

    async def incidents(
        self,
        *,
        state: IncidentState | None = None,
        investigation: InvestigationState | None = None,
        service: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[IncidentRecord]:
        return await self._db.read(
            incidents.incidents, state=state, investigation=investigation, service=service, limit=limit, offset=offset
        )

    async def incident_with_report(self, incident_id: str) -> tuple[IncidentRecord | None, Report | None, str]:
        return await self._db.read(investigations.incident_with_report, incident_id)

    async def report(self, incident_id: str) -> Report | None:
        return await self._db.read(investigations.report, incident_id)
