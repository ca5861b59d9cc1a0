"""The durable queue in the store, the group-commit inbox, leases and the charts."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from opsagent.correlation import Correlator
from opsagent.models import TimeRange
from opsagent.service.charts import Chart, Marker, svg
from opsagent.service.queue import Inbox, Owner, settle
from opsagent.store import Accepted, IncidentRecord, JobOutcome, NotificationIn, ServiceStore, Store, StoreLocation
from opsagent.store.storms import Delivery
from tests.test_lessons import lesson

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def note(
    group: str = "g1", status: str = "firing", at: datetime = NOW, started: tuple[datetime, ...] = ()
) -> NotificationIn:
    return NotificationIn(
        group_key=group,
        status=status,  # type: ignore[arg-type]
        receiver="opsagent",
        service="order-service",
        alertname="HighLatency",
        title="order-service slow",
        payload='{"version": "4"}',
        received_at=at,
        first_started=min(started, default=None),
        last_started=max(started, default=None),
    )


def test_accept_dedups_by_group_in_one_transaction(store_location: StoreLocation) -> None:
    with Store(store_location) as store:
        results = store.accept(
            [note("a"), note("a"), note("b"), note("a", "resolved"), note("a"), note("c", "resolved")]
        )
        assert [r.action for r in results] == ["opened", "updated", "opened", "resolved", "opened", "ignored"]
        assert results[0].incident_id == results[1].incident_id == results[3].incident_id != results[4].incident_id
        assert [r.job_id is not None for r in results] == [True, False, True, False, True, False]
        assert store.notification_count() == 6 and store.job_counts()["queued"] == 3
        first = store.incident(results[0].incident_id or "")
        assert first is not None and first.state == "resolved" and first.notifications == 3


def test_a_group_firing_again_after_an_unheard_resolution_opens_a_new_incident(store_location: StoreLocation) -> None:
    m = timedelta(minutes=1)
    skew = 30 * m  # the alerting side's clock runs half an hour ahead: only its own times are compared
    a, b, c = NOW + skew - 2 * m, NOW + skew + 10 * m, NOW + skew + 300 * m
    with Store(store_location) as store:
        first = store.accept([note("g", at=NOW, started=(a,))])[0]
        # re-notified, then joined by an alert that started since: one episode while any old one fires
        assert store.accept([note("g", at=NOW + 5 * m, started=(a,))])[0].action == "updated"
        assert store.accept([note("g", at=NOW + 15 * m, started=(a, b))])[0].action == "updated"
        assert store.accept([note("g", at=NOW + 20 * m, started=(b,))])[0].action == "updated"  # b was seen
        # every alert resolved (that notification never came) and the group fired again: all of the
        # notification's alerts started after every alert the incident has seen
        again = store.accept([note("g", at=NOW + 301 * m, started=(c,))])[0]
        assert again.action == "opened" and again.incident_id != first.incident_id and again.job_id is not None
        old = store.incident(first.incident_id or "")
        assert old is not None and old.state == "resolved" and old.notifications == 4
        assert store.accept([note("g", at=NOW + 305 * m, started=(c,))])[0].incident_id == again.incident_id
        # no start known (the list was truncated, or nothing fires): dedup as before
        assert store.accept([note("g", at=NOW + 900 * m)])[0].action == "updated"


def test_jobs_are_leased_renewed_retaken_and_given_up(store_location: StoreLocation) -> None:
    with Store(store_location) as store:
        store.accept([note("a"), note("b")])
        t = 1_000.0
        job = store.claim_job(owner="h:1:x", now=t, lease_s=10, max_attempts=2)
        assert job is not None and job.attempts == 1
        other = store.claim_job(owner="h:2:y", now=t, lease_s=10, max_attempts=2)
        assert other is not None and other.id != job.id
        assert store.claim_job(owner="h:2:y", now=t + 5, lease_s=10, max_attempts=2) is None  # both leased
        store.renew_leases([job.id], owner="h:1:x", until=t + 30)
        retaken = store.claim_job(owner="h:3:z", now=t + 15, lease_s=10, max_attempts=2)
        assert retaken is not None and retaken.id == other.id and retaken.attempts == 2  # its lease ran out
        # the old owner's late answer is ignored; the new owner's counts
        assert store.finish_job(other.id, owner="h:2:y", now=NOW, outcome=JobOutcome(outcome="confirmed")) is None
        done = store.finish_job(other.id, owner="h:3:z", now=NOW, outcome=JobOutcome(outcome="confirmed"))
        assert isinstance(done, IncidentRecord) and done.investigation == "done" and done.outcome == "confirmed"
        # the first job's owner dies twice: the third claim gives up on it
        assert store.claim_job(owner="h:4:w", now=t + 45, lease_s=10, max_attempts=2) is not None
        assert store.claim_job(owner="h:5:v", now=t + 60, lease_s=10, max_attempts=2) is None
        failed = store.incident(job.incident_id)
        assert failed is not None and failed.investigation == "failed" and "gave up after 2" in (failed.error or "")
        assert store.job_counts() == {"queued": 0, "running": 0, "done": 1, "failed": 1}


def test_pruning_deletes_old_finished_incidents_with_their_trail_and_keeps_the_rest(
    store_location: StoreLocation,
) -> None:
    old, recent = NOW - timedelta(days=100), NOW - timedelta(days=1)
    with Store(store_location) as store:
        # old and finished; old but still queued; old and running; recent and finished; an old ignored note
        accepted = store.accept([note("old-done", at=old), note("old-queued", at=old), note("old-running", at=old)])
        store.accept([note("old-done", at=old), note("never-open", "resolved", at=old), note("recent", at=recent)])
        kept = store.upsert_lesson(lesson())[0]
        for owner, group in (("h:1:a", "old-done"), ("h:1:a", "old-running"), ("h:1:a", "recent")):
            job = store.claim_job(owner=owner, now=1.0, lease_s=1e12, max_attempts=3)
            assert job is not None
            if group != "old-running":
                stamp = old if group == "old-done" else recent
                store.finish_job(job.id, owner=owner, now=stamp, outcome=JobOutcome(outcome="confirmed"))
        old_done = accepted[0].incident_id or ""
        assert store.notification_count() == 6

        assert store.prune(before=NOW - timedelta(days=90), batch=1) == 1  # a batch at a time
        assert store.prune(before=NOW - timedelta(days=90)) == 0
        assert store.incident(old_done) is None
        left = {i.group_key for i in store.incidents(limit=100)}
        assert left == {"old-queued", "old-running", "recent"}  # unfinished investigations stay, however old
        assert store.notification_count() == 3  # the old incident's two and the ignored one went
        assert store.job_counts() == {"queued": 1, "running": 1, "done": 1, "failed": 0}
        assert store.job_counts(("queued",)) == {"queued": 1}
        assert [x.id for x in store.lessons()] == [kept.id]  # lessons always stay


def test_a_dead_processs_jobs_go_back_to_the_queue_at_start(store_location: StoreLocation) -> None:
    owner = Owner()
    dead_pid = 2**22 + 17  # above pid_max: no such process
    with Store(store_location) as store:
        store.accept([note("a"), note("b"), note("c")])
        store.claim_job(owner=f"{owner.host}:{dead_pid}:aaaa", now=1.0, lease_s=1e9, max_attempts=3)
        store.claim_job(owner=f"other-host:{dead_pid}:bbbb", now=1.0, lease_s=1e9, max_attempts=3)
        store.claim_job(owner=f"{owner.host}:{os.getpid()}:cccc", now=1.0, lease_s=1e9, max_attempts=3)
        requeued = store.requeue_orphans(owner.orphaned)
        # the dead local process's job, and an earlier life of this very pid (a container restart)
        assert len(requeued) == 2 and store.job_counts()["queued"] == 2 and store.job_counts()["running"] == 1
    assert not owner.orphaned(str(owner)) and not owner.orphaned("garbage")


def test_the_inbox_commits_concurrent_notifications_together(
    store_location: StoreLocation, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    original = ServiceStore.deliver

    async def counting(
        self: ServiceStore, deliveries: list[Delivery], correlator: Callable[[], Correlator] | None
    ) -> list[list[Accepted]]:
        calls.append(len(deliveries))
        return await original(self, deliveries, correlator)

    monkeypatch.setattr(ServiceStore, "deliver", counting)

    async def run() -> list[str]:
        store = await ServiceStore.open(store_location)
        try:
            inbox = Inbox(store)
            results = await asyncio.gather(*(inbox.accept(note(f"g{i % 5}")) for i in range(40)))
        finally:
            await store.close()
        return [r.action for r in results]

    actions = asyncio.run(run())
    assert actions.count("opened") == 5 and actions.count("updated") == 35
    assert sum(calls) == 40 and len(calls) < 40  # fewer commits than notifications
    with Store(store_location) as store:
        assert store.notification_count() == 40 and store.job_counts()["queued"] == 5


class _InstantStore:
    """A store that writes every batch at once (one writer, as SQLite has)."""

    concurrent_writes = 1

    async def deliver(self, deliveries: list[Delivery], correlator: object) -> list[list[str]]:
        await asyncio.sleep(0)
        return [["stored"] for _ in deliveries]


def test_a_notification_arriving_as_the_last_batch_is_written_is_written_too() -> None:
    # The writer that wrote the last batch has found nothing more to write and ended, but the loop has
    # not yet run its done callbacks (they run later, so the inbox still lists it): a notification
    # arriving in that moment starts a writer of its own rather than wait for one that will never come
    # (it hung two web replicas under load).
    async def run() -> list[str]:
        inbox = Inbox(_InstantStore())  # type: ignore[arg-type]
        ended = asyncio.get_running_loop().create_future()
        ended.set_result(None)  # a writer that has ended, not yet forgotten
        inbox._flushers.add(ended)  # type: ignore[arg-type]
        return await asyncio.wait_for(inbox.deliver(Delivery.plain(note("g"))), timeout=5)  # type: ignore[return-value]

    assert asyncio.run(run()) == ["stored"]


def test_charts_mark_baseline_onset_shift_changes_and_escape_text() -> None:
    start = NOW - timedelta(hours=1)
    chart = Chart(
        observation_id="m-1",
        role="supports",
        title='threadpool <active> & "queue"',
        unit="threads",
        points=[(start.timestamp() + 60 * i, 4.0 if i > 40 else 30.0) for i in range(60)],
        window=TimeRange(start=start, end=NOW),
        baseline=TimeRange(start=start, end=start + timedelta(minutes=30)),
        baseline_level=30.0,
        onset=start + timedelta(minutes=41),
        shift=start + timedelta(minutes=40),
        changes=[Marker(ts=start + timedelta(minutes=38), label="config <push>")],
        limit=32.0,
    )
    drawn = svg(chart)
    assert drawn.startswith("<svg") and drawn.endswith("</svg>")
    for cls in ("baseline", "onset", "shift", "change", "limit", "base-level", "series"):
        assert f'class="{cls}"' in drawn, cls
    assert "<active>" not in drawn and "&lt;active&gt;" in drawn and "config &lt;push&gt;" in drawn


def test_a_job_whose_worker_keeps_dying_is_failed_after_its_attempts(
    tmp_path: Path, store_location: StoreLocation
) -> None:
    from fastapi.testclient import TestClient

    from opsagent.service.app import create_app
    from tests.service_support import AUTH, DyingProvider, notification, settings, wait_for

    app = create_app(settings(tmp_path, job_attempts=2), provider=DyingProvider(), runner="process", poll_s=0.2)
    with TestClient(app, headers=AUTH) as client:
        incident_id = client.post("/webhook/alertmanager", json=notification(), headers=AUTH).json()["incident_id"]

        def failed() -> dict[str, object] | None:
            incident = client.get(f"/incidents/{incident_id}").json()["incident"]
            return incident if incident["investigation"] == "failed" else None

        incident = wait_for(failed, timeout_s=60)
        assert "gave up after 2 attempt(s)" in str(incident["error"])
        assert client.get("/readyz").status_code == 200  # the service itself carries on
        assert 'opsagent_investigations_total{outcome="failed"}' in client.get("/metrics").text


def test_stopping_does_not_wait_forever_for_a_task_that_ignores_its_cancellation() -> None:
    async def go() -> tuple[float, bool]:
        release = asyncio.Event()

        async def stubborn() -> None:
            while not release.is_set():
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    continue  # swallows every cancellation, as a buggy job might

        task = asyncio.create_task(stubborn(), name="stubborn")
        await asyncio.sleep(0)
        task.cancel()
        started = time.perf_counter()
        await settle([task], timeout_s=0.3)
        waited = time.perf_counter() - started
        still_running = not task.done()
        release.set()
        task.cancel()
        await asyncio.wait([task], timeout=1)
        return waited, still_running

    waited, still_running = asyncio.run(go())
    assert still_running and 0.25 <= waited < 2.0
