"""What runs in a worker: one job, from the notification it was queued for to a stored report.

A :class:`Runner` runs jobs in worker processes (the default: an investigation is CPU work and must
not slow the webhook's answers) or threads (tests), passing picklable values only. A :class:`Worker`
opens its own store connection, to read the lessons the investigation uses (whichever replica
learnt them: the store is shared); the report and the lessons it teaches come back to the
dispatcher, which stores them with the job's end in one transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from multiprocessing import get_context
from typing import Literal

import structlog
from pydantic import BaseModel

from opsagent.catalog import default_catalog
from opsagent.correlation import CorrelationSettings, alert_key, lead_storm
from opsagent.fixtures import Edge
from opsagent.incident import joined_alert
from opsagent.lessons import rule_check
from opsagent.links import LinkSettings
from opsagent.logconfig import configure
from opsagent.models import Alert, JoinedAlert, Lesson, Report
from opsagent.pipeline import investigate
from opsagent.plan import InvestigationPlan, Planner, Reading
from opsagent.service.charts import Chart, collect
from opsagent.service.payload import WebhookPayload
from opsagent.service.provider import SourceProvider, provider_for
from opsagent.settings import Settings
from opsagent.sources import Sources
from opsagent.store import FinishedReport, JobOutcome, Store, StoreError, StoreLocation
from opsagent.tracing import configure_from_environment as configure_tracing

log = structlog.get_logger("opsagent.service.worker")


@dataclass(frozen=True)
class WorkerConfig:
    """What a worker runs jobs with: where the store is, what it reads for an alert (``provider``),
    how it plans an investigation (``planner``: the settings' playbooks, strategy, budget, lessons
    and links, as the CLI plans with them) and how it joins a storm's alerts."""

    store: StoreLocation
    provider: SourceProvider
    planner: Planner
    niceness: int = 10
    log_level: str = "info"
    correlation: CorrelationSettings | None = None


def worker_config(
    settings: Settings, *, provider: SourceProvider | None = None, log_level: str = "info"
) -> WorkerConfig:
    """The workers' configuration from the service's settings: the sources they provide (by default
    :func:`~opsagent.service.provider.provider_for`'s) and the plan the CLI makes from the same
    settings."""
    return WorkerConfig(
        store=settings.store,
        provider=provider if provider is not None else provider_for(settings),
        planner=Planner.from_settings(settings),
        log_level=log_level,
        correlation=settings.correlation,
    )


class JobInput(BaseModel):
    job_id: int
    incident_id: str
    payload: str
    #: the payloads of the incident's later firing notifications (alerts of its storm that joined it)
    joined: list[str] = []


class JobOutput(BaseModel):
    outcome: JobOutcome
    report: FinishedReport
    source_errors: dict[str, str]


class Worker:
    """Runs jobs with one configuration; one store connection per thread it runs on."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self._local = threading.local()

    def store(self) -> Store:
        store: Store | None = getattr(self._local, "store", None)
        if store is None:
            store = Store(self.config.store)
            self._local.store = store
        return store

    def _forget_store(self) -> None:
        store: Store | None = getattr(self._local, "store", None)
        self._local.store = None
        if store is not None:
            with contextlib.suppress(Exception):  # it failed already; closing it is a courtesy
                store.close()

    def reading(self, payload: WebhookPayload) -> Reading | None:
        """What the first of the notification's alerts a provider has data for reads."""
        for candidate in payload.candidates():
            reading = self.config.provider.reading(candidate.as_alert())
            if reading is not None:
                return reading
        return None

    def plan(self, job: JobInput, lessons: Sequence[Lesson]) -> InvestigationPlan:
        """The plan of the job's investigation. With nothing to read, it is investigated anyway:
        the report names every source it could not read."""
        payload = WebhookPayload.model_validate_json(job.payload)
        reading = self.reading(payload) or Reading(
            name="none", alert=payload.summary().lead.as_alert(), sources=Sources(), catalog=default_catalog()
        )
        later = [a for text in job.joined for a in WebhookPayload.model_validate_json(text).firing]
        # the alerts beside the one investigated from (a recording's own alert, where it replays one)
        others = [a.as_alert() for a in [*payload.firing, *later]]
        others = [a for a in others if alert_key(a) != alert_key(reading.alert)]
        planner = self.config.planner
        return planner.plan(
            reading,
            lessons=lessons,
            incident_id=job.incident_id,
            joined=joined_alerts(reading.alert, others, reading.topology, self.config.correlation),
            links=_links(planner.links, payload),
        )

    def run(self, job: JobInput) -> JobOutput:
        """Investigate the alert group a job was queued for. The report comes back serialised, with
        the lessons it teaches, for the service to store with the job's end in one transaction."""
        try:
            lessons = self.store().lessons()
        except StoreError as exc:
            log.warning("worker.lessons_unreadable", incident_id=job.incident_id, error=str(exc))
            lessons = []
            self._forget_store()  # the next job connects again (a restarted server, a lost connection)
        plan = self.plan(job, lessons)
        started = time.perf_counter()
        report, charts = asyncio.run(_investigate(plan))
        wall_ms = round((time.perf_counter() - started) * 1000, 1)
        issues = rule_check(report)
        if issues:  # a live incident has no truth to learn against: only conclusions that pass the rules teach
            log.info("worker.lessons_skipped", incident_id=job.incident_id, issues=issues)
            report = report.model_copy(update={"lessons": []})  # its page does not list them as written
        rc = report.root_cause
        outcome = JobOutcome(
            outcome=report.status,
            root_component=rc.component if rc else None,
            root_kind=rc.kind if rc else None,
            summary=report.statement[:500],
            source=plan.reading.name,
            wall_ms=wall_ms,
            charts="[" + ",".join(c.model_dump_json() for c in charts) + "]",
        )
        finished = FinishedReport.of(report, lessons=[] if issues else report.lessons)
        return JobOutput(outcome=outcome, report=finished, source_errors=dict(report.unreadable_sources))


# ---------------------------------------------------------------- runners

_process_worker: Worker | None = None


def _watch_parent(parent_pid: int) -> None:
    """A worker whose service died (kill -9) exits too: its job is resumed by the next service."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            os._exit(70)


def _init_process(config: WorkerConfig, parent_pid: int) -> None:
    global _process_worker
    if config.niceness:  # investigations yield the CPU to the webhook's answers (first: loading them does too)
        os.nice(config.niceness)
    configure(level=config.log_level, json=True)
    configure_tracing()  # a worker process exports its investigations' traces itself, when asked to
    _process_worker = Worker(config)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True, name="watch-parent").start()


def _started() -> None:
    """Nothing: submitted once per worker process so that the pool starts them all."""


def _run_in_process(job: JobInput) -> JobOutput:
    if _process_worker is None:
        raise RuntimeError("worker process not initialised")
    return _process_worker.run(job)


class Runner:
    """Runs jobs, at most ``workers`` at once, in worker processes (``process``) or threads."""

    def __init__(self, config: WorkerConfig, *, workers: int, kind: Literal["process", "thread"] = "process") -> None:
        self.config = config
        self.workers = workers
        self.kind = kind
        self._worker = Worker(config) if kind == "thread" else None
        self._executor = self._make()

    def _make(self) -> Executor:
        if self.kind == "thread":
            return ThreadPoolExecutor(self.workers, thread_name_prefix="investigation")
        pool = ProcessPoolExecutor(
            self.workers,
            mp_context=get_context("spawn"),
            initializer=_init_process,
            initargs=(self.config, os.getpid()),
        )
        for _ in range(self.workers):  # started now, not by the first alert (a second of imports each)
            pool.submit(_started)
        return pool

    async def run(self, job: JobInput) -> JobOutput:
        """The job's output. Raises ``BrokenProcessPool`` when a worker died under it (the pool is
        replaced once, however many jobs it was running)."""
        loop = asyncio.get_running_loop()
        executor = self._executor
        if self._worker is not None:
            return await loop.run_in_executor(executor, self._worker.run, job)
        try:
            return await loop.run_in_executor(executor, _run_in_process, job)
        except BrokenProcessPool:
            if executor is self._executor:
                self.restart()
            raise

    def restart(self) -> None:
        """A fresh pool, after a worker died or hung; jobs still running in the old one are lost
        to it (their callers see an error and give the job back to the queue)."""
        old, self._executor = self._executor, self._make()
        # stopped off the caller's thread (the event loop): waiting for the old workers to exit is not its job
        threading.Thread(target=self._stop, args=(old,), name="stop-workers", daemon=True).start()

    def close(self, *, busy: bool = True) -> None:
        """Stop the workers: idle ones exit cleanly; busy ones are stopped mid-investigation."""
        if busy:
            self._stop(self._executor)
        else:
            self._executor.shutdown(wait=True, cancel_futures=True)

    @staticmethod
    def _stop(executor: Executor) -> None:
        # No public way to stop a running investigation: its job goes back to the queue.
        processes = list((getattr(executor, "_processes", None) or {}).values())
        executor.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        if isinstance(executor, ProcessPoolExecutor):
            for process in processes:
                process.join(timeout=5)
            executor.shutdown(wait=True)  # its queues and their semaphores are released, not leaked


def _links(configured: LinkSettings | None, payload: WebhookPayload) -> LinkSettings:
    """The configured links; the silence link goes to the Alertmanager that sent the notification
    when none is configured (its ``externalURL``)."""
    links = configured or LinkSettings()
    if links.alertmanager_url is None and payload.external_url:
        links = links.model_copy(update={"alertmanager_url": payload.external_url})
    return links


def joined_alerts(
    lead: Alert, others: list[Alert], edges: list[Edge], settings: CorrelationSettings | None
) -> list[JoinedAlert]:
    """The other alerts an incident received, as its objective lists them: with the reason the
    topology gives, or, for one the webhook joined on what this process cannot see (a topology only
    the web process was given), saying so. Without correlation, none: one alert group's incident
    is investigated from its lead alert, as before."""
    if settings is None or not settings.enabled or not others:
        return []
    topology = [*settings.topology, *edges]
    storm = lead_storm(lead, others, topology, window=timedelta(seconds=settings.window_s), hops=settings.hops)
    rest = {alert_key(a): a for a in others if alert_key(a) not in storm.keys}
    extra = [joined_alert(a, "joined by the webhook service") for a in rest.values()]
    return (storm.joined + extra)[: settings.max_members]


async def _investigate(plan: InvestigationPlan) -> tuple[Report, list[Chart]]:
    try:
        report = await investigate(plan, now=datetime.now(UTC))
        return report, await collect(report, plan.reading)
    finally:
        if plan.reading.close is not None:  # the live clients the reading opened for this job
            await plan.reading.close()
