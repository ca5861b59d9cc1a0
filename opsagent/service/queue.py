"""The durable queue, from the service's side: accepting notifications and running their jobs.

Every store call is awaited on a :class:`~opsagent.store.ServiceStore` (PostgreSQL's async pool, or
SQLite's connections on threads of their own), so the event loop never waits on the disk.
:class:`Inbox` commits the notifications that arrive while a commit is in flight together in the
next one (group commit): one commit for many answers, each answered only once its notification is
stored. :class:`Dispatcher` leases queued jobs to a :class:`Runner`, at most ``workers`` at once,
renews the leases while they run (the heartbeat), and records how each ended. A job whose process
was killed is given back to the queue when a process of the same host starts again, or taken over
by any replica once its lease has run out.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
import traceback
from collections.abc import Awaitable, Callable
from concurrent.futures.process import BrokenProcessPool
from datetime import UTC, datetime, timedelta
from functools import partial

import structlog

from opsagent.correlation import Correlator
from opsagent.service.metrics import ServiceMetrics
from opsagent.service.worker import JobInput, JobOutput, Runner
from opsagent.store import Accepted, ClaimedJob, NotificationIn, ServiceStore, StoreError
from opsagent.store.storms import Delivery

log = structlog.get_logger("opsagent.service.queue")

#: Most notifications written in one transaction.
MAX_BATCH = 256
#: Most incidents pruned in one transaction.
PRUNE_BATCH = 500
#: How long stopping waits for its cancelled tasks: a task that does not end by then is logged and
#: left behind (its job goes back to the queue all the same), so a stop never hangs the process.
STOP_WAIT_S = 10.0


async def settle(tasks: list[asyncio.Task[None]], *, timeout_s: float = STOP_WAIT_S) -> None:
    """Wait for cancelled ``tasks`` to end, at most ``timeout_s``; those still running are logged
    with where they are stuck."""
    if not tasks:
        return
    done, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in done:  # an exception a task ended with is taken here, as gather would, not left unretrieved
        if not task.cancelled():
            task.exception()
    for task in pending:
        where = "; ".join(f"{f.f_code.co_filename}:{f.f_lineno}" for f in task.get_stack(limit=3))
        log.warning("queue.stop_stuck", task=task.get_name(), waited_s=timeout_s, at=where)


class Inbox:
    """Accepts notifications with group commit: the first is written at once; those arriving
    meanwhile are written together next, in arrival order. Up to the store's ``concurrent_writes``
    batches are in flight at once (SQLite: one, its writer; PostgreSQL: two, so that one batch's
    round trips and commit overlap the next one's). ``correlator``: a factory of empty correlators
    when alert correlation is on; each batch then splits its notifications by storm against the
    storms in the store (:mod:`opsagent.store.storms`)."""

    def __init__(self, store: ServiceStore, *, correlator: Callable[[], Correlator] | None = None) -> None:
        self.store = store
        self.correlator = correlator
        self._pending: list[tuple[Delivery, asyncio.Future[list[Accepted]]]] = []
        self._flushers: set[asyncio.Task[None]] = set()

    async def accept(self, notification: NotificationIn) -> Accepted:
        (accepted,) = await self.deliver(Delivery.plain(notification))
        return accepted

    async def deliver(self, delivery: Delivery) -> list[Accepted]:
        """What each notification ``delivery`` splits into did, once all are stored."""
        future: asyncio.Future[list[Accepted]] = asyncio.get_running_loop().create_future()
        self._pending.append((delivery, future))
        # A writer that found nothing more to write has ended, though the loop may not have run its done
        # callback yet (which forgets it): only writers still running will come back for this one.
        if sum(1 for f in self._flushers if not f.done()) < self.store.concurrent_writes:
            flusher = asyncio.create_task(self._flush())
            self._flushers.add(flusher)
            flusher.add_done_callback(self._flushers.discard)
        return await asyncio.shield(future)

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            deliveries = [d for d, _ in batch]
            try:
                results = await self.store.deliver(deliveries, self.correlator)
            except Exception as exc:  # every waiter hears why its notification was not stored
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Owner:
    """Who holds a lease: ``host:pid:token``. At start, a job held by a dead process of this
    host (or by an earlier life of this very pid, as in a container) is an orphan."""

    def __init__(self) -> None:
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.token = secrets.token_hex(4)

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.token}"

    def orphaned(self, owner: str) -> bool:
        parts = owner.rsplit(":", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            return False
        host, pid, token = parts[0], int(parts[1]), parts[2]
        if host != self.host or token == self.token:
            return False  # another host's job waits for its lease to run out
        return pid == self.pid or not _alive(pid)


class Dispatcher:
    """Leases queued jobs to the runner and records how each ended."""

    def __init__(
        self,
        *,
        store: ServiceStore,
        runner: Runner,
        metrics: ServiceMetrics,
        lease_s: float = 30.0,
        timeout_s: float = 300.0,
        attempts: int = 3,
        poll_s: float = 2.0,
        on_finished: Callable[[], None] | None = None,
        retention_s: float | None = None,
        prune_every_s: float = 3600.0,
    ) -> None:
        self.store = store
        self.runner = runner
        self.metrics = metrics
        self.lease_s = lease_s
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.poll_s = poll_s
        #: told when a job's end is recorded (it owes the sinks a notification, in the outbox now)
        self.on_finished = on_finished
        self.retention_s = retention_s
        self.prune_every_s = prune_every_s
        self.owner = Owner()
        self._wake = asyncio.Event()
        self._running: dict[int, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._main: asyncio.Task[None] | None = None
        self._troubles: dict[str, str] = {}
        self.started = False

    @property
    def alive(self) -> bool:
        return self._main is not None and not self._main.done()

    def wake(self) -> None:
        self._wake.set()

    def _trouble(self, event: str, exc: StoreError) -> None:
        """A store failure of a periodic task, logged when it starts (or changes), not every tick."""
        if self._troubles.get(event) != str(exc):
            self._troubles[event] = str(exc)
            log.warning(event, error=str(exc))

    def _fine(self, event: str) -> None:
        if self._troubles.pop(event, None) is not None:
            log.info(event.replace("_failed", "_recovered"))

    async def start(self) -> None:
        try:  # a damaged store must not stop the service: readiness says so, leases still run out
            requeued = await self.store.requeue_orphans(self.owner.orphaned)
        except StoreError as exc:
            self._trouble("queue.resume_failed", exc)
        else:
            if requeued:
                log.info("queue.resumed", jobs=requeued)
        self._main = asyncio.create_task(self._loop(), name="dispatcher")
        self._spawn(self._renew())
        self._spawn(self.store.listen(self.wake))  # jobs queued by other replicas start at once
        if self.retention_s:
            self._spawn(self._prune(self.retention_s))
        self.started = True

    async def stop(self) -> None:
        """Stop taking jobs; jobs under way go back to the queue, not counted as an attempt, and
        their workers are stopped: the next start (this host or another) runs them at once."""
        held = list(self._running)
        tasks = [t for t in (self._main, *self._running.values(), *self._background) if t is not None]
        for task in tasks:
            task.cancel()
        await settle(tasks)
        self.runner.close(busy=bool(held))
        if held:
            try:
                await self.store.release_jobs(held, owner=str(self.owner), error="the service stopped")
            except StoreError as exc:
                log.warning("queue.release_failed", jobs=held, error=str(exc))
            log.info("queue.released", jobs=held)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                while len(self._running) < self.runner.workers:
                    job = await self._claim()
                    if job is None:
                        break
                    task = asyncio.create_task(self._execute(job), name=f"job-{job.id}")
                    self._running[job.id] = task
                    task.add_done_callback(partial(self._finished, job.id))
                self._fine("queue.claim_failed")
            except StoreError as exc:  # a locked or failing store: try again at the next tick
                self._trouble("queue.claim_failed", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.poll_s)

    def _finished(self, job_id: int, _task: object = None) -> None:
        self._running.pop(job_id, None)
        self._wake.set()

    async def _claim(self) -> ClaimedJob | None:
        return await self.store.claim_job(
            owner=str(self.owner), now=time.time(), lease_s=self.lease_s, max_attempts=self.attempts
        )

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            held = list(self._running)
            if held:
                try:
                    await self.store.renew_leases(held, owner=str(self.owner), until=time.time() + self.lease_s)
                except StoreError as exc:
                    log.warning("queue.renew_failed", jobs=held, error=str(exc))

    async def _prune(self, retention_s: float) -> None:
        """Deletes incidents untouched for ``retention_s`` (with their notifications, job and report)
        at start and then every ``prune_every_s``, a batch per transaction so accepts interleave."""
        while True:
            before = datetime.now(UTC) - timedelta(seconds=retention_s)
            removed = 0
            try:
                while (batch := await self.store.prune(before=before, batch=PRUNE_BATCH)) > 0:
                    removed += batch
                    if batch < PRUNE_BATCH:
                        break
            except StoreError as exc:
                log.warning("store.prune_failed", error=str(exc))
            if removed:
                log.info("store.pruned", incidents=removed, before=before.isoformat())
            await asyncio.sleep(self.prune_every_s)

    async def _execute(self, job: ClaimedJob) -> None:
        try:
            await self._run(job)
        except StoreError as exc:  # the job keeps its lease until it runs out, then is taken again
            log.error("job.unrecorded", job_id=job.id, incident_id=job.incident_id, error=str(exc))

    async def _run(self, job: ClaimedJob) -> None:
        owner = str(self.owner)
        log.info("job.start", job_id=job.id, incident_id=job.incident_id, attempt=job.attempts)
        started = time.perf_counter()
        run = self.runner.run(
            JobInput(job_id=job.id, incident_id=job.incident_id, payload=job.payload, joined=job.joined)
        )
        try:
            output: JobOutput = await asyncio.wait_for(run, timeout=self.timeout_s)
        except BrokenProcessPool:  # a worker died under it: the job goes back to the queue
            log.warning("job.worker_died", job_id=job.id, incident_id=job.incident_id)
            await self.store.release_job(job.id, owner=owner, error="the worker died")
            return
        except TimeoutError:
            log.error("job.timeout", job_id=job.id, incident_id=job.incident_id, timeout_s=self.timeout_s)
            self.runner.restart()  # the hung worker is stopped
            await self._fail(job, f"timed out after {self.timeout_s:.0f} s", started)
            return
        except Exception as exc:  # whatever stopped it, the job is recorded as failed, the service goes on
            log.error(
                "job.failed",
                job_id=job.id,
                incident_id=job.incident_id,
                error=repr(exc),
                traceback=traceback.format_exc(limit=10),
            )
            await self._fail(job, f"{type(exc).__name__}: {exc}", started)
            return
        elapsed = time.perf_counter() - started
        record = await self.store.finish_job(
            job.id, owner=owner, now=datetime.now(UTC), outcome=output.outcome, report=output.report
        )
        self.metrics.investigations.labels(outcome=output.outcome.outcome).inc()
        self.metrics.duration.observe(elapsed)
        for source in output.source_errors:
            self.metrics.source_errors.labels(source=source).inc()
        log.info(
            "job.done",
            job_id=job.id,
            incident_id=job.incident_id,
            outcome=output.outcome.outcome,
            root_cause=f"{output.outcome.root_component}/{output.outcome.root_kind}",
            seconds=round(elapsed, 2),
        )
        if record is not None and self.on_finished is not None:
            self.on_finished()

    async def _fail(self, job: ClaimedJob, error: str, started: float) -> None:
        owner = str(self.owner)
        record = await self.store.finish_job(job.id, owner=owner, now=datetime.now(UTC), error=error)
        if record is not None and self.on_finished is not None:
            self.on_finished()
        self.metrics.investigations.labels(outcome="failed").inc()
        self.metrics.duration.observe(time.perf_counter() - started)
