"""Sending what the outbox holds: each notification claimed by one sender, posted, and recorded.

The store writes a notification into its outbox in the transaction that changes the incident
(:mod:`opsagent.store.outbox`); this drains it. :class:`NotificationSender` claims the notifications
that are due, a few at once, posts each once to its sink, and records the outcome before it claims
more: ``done`` is final (the row is never sent again), a failure worth another try is due again
after an exponential backoff (at least what the sink asked with ``Retry-After``), kept in the store
with its attempts, so a restart neither forgets a notification nor starts its backoff over. A
sender killed mid-post leaves its row leased: the next sender started on its host takes it back at
once, any other once the lease runs out, and posts it again under the same key, which the sink
receives as ``Idempotency-Key``.

The clock is injected: tests move time instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence

import structlog

from opsagent.retrying import RetryPolicy
from opsagent.service.metrics import ServiceMetrics
from opsagent.service.notifier import Delivery, Sink
from opsagent.service.queue import Owner, settle
from opsagent.store import ServiceStore, StoreError
from opsagent.store.outbox import OutboxItem

log = structlog.get_logger("opsagent.service.outbox")


class NotificationSender:
    """Drains the store's outbox into ``sinks``, ``concurrency`` posts at once."""

    def __init__(
        self,
        *,
        store: ServiceStore,
        sinks: Sequence[Sink],
        policy: RetryPolicy,
        metrics: ServiceMetrics | None = None,
        concurrency: int = 4,
        lease_s: float = 30.0,
        poll_s: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.sinks = {s.name: s for s in sinks}
        self.policy = policy
        self.metrics = metrics
        self.concurrency = concurrency
        self.lease_s = lease_s
        self.poll_s = poll_s
        self.clock = clock
        self.owner = Owner()
        self._wake = asyncio.Event()
        self._main: asyncio.Task[None] | None = None
        self._trouble: str | None = None

    @property
    def max_attempts(self) -> int:
        return self.policy.retries + 1

    def wake(self) -> None:
        """Something was written to the outbox: look now rather than at the next poll."""
        self._wake.set()

    async def start(self) -> None:
        try:  # a post a killed process of this host left half done goes out again now, not in lease_s
            released = await self.store.release_orphaned_notifications(self.owner.orphaned, now=self.clock())
        except StoreError as exc:
            log.warning("notify.resume_failed", error=str(exc))
        else:
            if released:
                log.info("notify.resumed", notifications=released)
        self._main = asyncio.create_task(self._loop(), name="notification-sender")

    async def stop(self) -> None:
        """Stop sending; a post under way is cut off and its row, still leased, is taken again once
        the lease runs out (the sink sees the same key twice, at worst)."""
        if self._main is not None:
            self._main.cancel()
            await settle([self._main])
            self._main = None

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.send_due()
                if self._trouble is not None:
                    log.info("notify.store_recovered")
                    self._trouble = None
            except StoreError as exc:  # logged when it starts (or changes), not every tick
                if self._trouble != str(exc):
                    self._trouble = str(exc)
                    log.warning("notify.store_failed", error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.poll_s)

    async def send_due(self) -> int:
        """Post every notification due now, ``concurrency`` at once, until none is due; how many posts
        were made."""
        posts = 0
        while True:
            claimed: list[OutboxItem] = []
            while len(claimed) < self.concurrency:
                item = await self.store.claim_notification(
                    owner=str(self.owner),
                    now=self.clock(),
                    lease_s=self.lease_s,
                    max_attempts=self.max_attempts,
                    sinks=list(self.sinks),
                )
                if item is None:
                    break
                claimed.append(item)
            if not claimed:
                return posts
            await asyncio.gather(*(self._send(item) for item in claimed))
            posts += len(claimed)

    async def _send(self, item: OutboxItem) -> None:
        incident, report, _ = await self.store.incident_with_report(item.incident_id)
        if incident is None:  # pruned meanwhile
            await self._settle(item, Delivery(outcome="refused", problem="the incident is gone"))
            return
        sink = self.sinks[item.sink]
        try:
            delivery = await sink.deliver(incident, report, key=item.key, event=item.event, thread=item.thread)
        except Exception as exc:  # a fault of ours in one message: that message is tried again, the rest go on
            log.error("notify.error", sink=item.sink, incident_id=item.incident_id, key=item.key, error=repr(exc))
            delivery = Delivery(outcome="retry", problem=f"{type(exc).__name__}: {exc}")
        await self._settle(item, delivery)

    async def _settle(self, item: OutboxItem, delivery: Delivery) -> None:
        now = self.clock()
        context = {"sink": item.sink, "incident_id": item.incident_id, "key": item.key, "attempt": item.attempts}
        if delivery.outcome == "sent":
            held = await self.store.settle_notification(
                item.id, owner=str(self.owner), now=now, status="done", thread=delivery.thread
            )
            log.info("notify.sent", **context)
            result = "sent"
        elif delivery.outcome == "retry" and item.attempts < self.max_attempts:
            wait = max(self.policy.wait(item.attempts, None), delivery.wait_s or 0.0)
            held = await self.store.settle_notification(
                item.id, owner=str(self.owner), now=now, status="pending", next_try=now + wait, error=delivery.problem
            )
            log.info("notify.retry", **context, problem=delivery.problem, wait_s=round(wait, 3))
            result = "retried"
        else:
            held = await self.store.settle_notification(
                item.id, owner=str(self.owner), now=now, status="failed", error=delivery.problem
            )
            log.warning("notify.failed", **context, problem=delivery.problem)
            result = "failed"
        if not held:  # its lease ran out during the post and another sender has it now
            log.warning("notify.lease_lost", **context)
        if self.metrics is not None:
            self.metrics.notify.labels(result=result).inc()
