"""A running service: the parts its lifespan starts (the store, the inbox, the dispatcher of
investigations and the sender of notifications, as the process's role asks) and stops."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Literal

import structlog
from fastapi import FastAPI, HTTPException

from opsagent.correlation import Correlator
from opsagent.retrying import RetryPolicy
from opsagent.service.auth import Credentials
from opsagent.service.metrics import ServiceMetrics
from opsagent.service.notifier import Sink, sinks_from
from opsagent.service.outbox import NotificationSender
from opsagent.service.queue import Dispatcher, Inbox
from opsagent.service.worker import Runner, WorkerConfig
from opsagent.settings import Settings
from opsagent.store import ServiceStore

log = structlog.get_logger("opsagent.service")

#: What a process of the service does (see :func:`opsagent.service.app.create_app`).
Role = Literal["all", "web", "worker"]


@dataclass
class Parts:
    settings: Settings
    metrics: ServiceMetrics
    store: ServiceStore
    inbox: Inbox
    dispatcher: Dispatcher | None
    sender: NotificationSender | None


class Running:
    """The service's parts while it runs; None before its lifespan starts them and after it stops."""

    def __init__(self) -> None:
        self.parts: Parts | None = None

    def current(self) -> Parts:
        """The parts, or a 503 to the request that asked before the service started."""
        if self.parts is None:
            raise HTTPException(503, "the service is starting")
        return self.parts


def lifespan(
    running: Running,
    *,
    settings: Settings,
    role: Role,
    config: WorkerConfig,
    runner: Literal["process", "thread"],
    sinks: Sequence[Sink] | None,
    metrics: ServiceMetrics,
    poll_s: float,
    credentials: Credentials,
    readers: Credentials,
    correlator: Callable[[], Correlator] | None = None,
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """What starts the service's parts with the application and stops them with it."""
    provider = config.provider

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # every role writes what an incident's changes owe the sinks; web replicas leave the sending
        # to the processes that run workers
        configured = list(sinks) if sinks is not None else sinks_from(settings)
        store = await ServiceStore.open(settings.store, sinks=[s.name for s in configured])  # or fails loudly
        dispatcher, sender = None, None
        if role != "web":
            if configured:
                sender = NotificationSender(
                    store=store,
                    sinks=configured,
                    metrics=metrics,
                    policy=RetryPolicy(
                        retries=settings.notify_attempts - 1,
                        backoff_s=settings.notify_backoff_s,
                        max_backoff_s=settings.notify_max_backoff_s,
                    ),
                    poll_s=poll_s,
                )
                await sender.start()
            dispatcher = Dispatcher(
                store=store,
                runner=Runner(config, workers=settings.workers, kind=runner),
                metrics=metrics,
                lease_s=settings.job_lease_s,
                timeout_s=settings.job_timeout_s,
                attempts=settings.job_attempts,
                poll_s=poll_s,
                on_finished=sender.wake if sender is not None else None,
                retention_s=settings.retention_days * 86400 or None,
            )
            await dispatcher.start()
        running.parts = Parts(settings, metrics, store, Inbox(store, correlator=correlator), dispatcher, sender)
        log.info(
            "service.start",
            role=role,
            workers=settings.workers if dispatcher is not None else 0,
            provider=provider.name,
            auth=repr(credentials),
            readers=repr(readers),
            notify=[s.name for s in configured],
            store=store.where,
        )
        try:
            yield
        finally:
            if dispatcher is not None:
                await dispatcher.stop()
            if sender is not None:
                await sender.stop()
            if sinks is None:  # the ones built here; a caller's are the caller's to close
                for sink in configured:
                    await sink.aclose()
            await store.close()
            running.parts = None
            log.info("service.stop")

    return lifespan
