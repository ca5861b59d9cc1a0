"""The notification outbox, on both backends: a notification is owed in the transaction that changes
the incident, sent by one sender, retried with a backoff kept in the store (so a restart neither
loses it nor starts its backoff over), never sent again once done, and a slow sink that answers
after the client gave up recognises the retry by its key. Time is a fake clock moved by the test."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import socket
from collections import Counter
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx
from fastapi import FastAPI, Request, Response

from opsagent.models import Report
from opsagent.retrying import RetryPolicy
from opsagent.service.notifier import IDEMPOTENCY_HEADER, SlackNotifier, WebhookNotifier
from opsagent.service.outbox import NotificationSender
from opsagent.store import IncidentRecord, JobOutcome, ServiceStore, StoreLocation
from opsagent.store.outbox import OutboxEvent
from tests.service_support import serving
from tests.test_service_queue import note

T = TypeVar("T")
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
START = NOW.timestamp() + 60
HOOK = "https://events.router.test/v2/enqueue?routing_key=plugh-secret"
#: 2 s after the first failed try, doubled each time, at most 5 minutes; 12 tries
POLICY = RetryPolicy(retries=11, backoff_s=2.0, max_backoff_s=300.0)


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def run(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(make())


async def investigate(store: ServiceStore, groups: int, *, resolve: int = 0) -> list[str]:
    """``groups`` incidents investigated (each owes its investigation's end), the first ``resolve`` of
    them resolved too; the keys they owe, in the order they were owed."""
    opened = await store.accept([note(f"g{i}") for i in range(groups)])
    for _ in range(groups):
        job = await store.claim_job(owner="w:1:t", now=START, lease_s=30, max_attempts=3)
        assert job is not None
        await store.finish_job(job.id, owner="w:1:t", now=NOW, outcome=JobOutcome(outcome="inconclusive"))
    await store.accept([note(f"g{i}", status="resolved") for i in range(resolve)])
    ids = [a.incident_id for a in opened]
    return [f"{i}:investigated" for i in ids] + [f"{i}:resolved" for i in ids[:resolve]]


def sender(store: ServiceStore, sink: object, clock: FakeClock) -> NotificationSender:
    return NotificationSender(store=store, sinks=[sink], policy=POLICY, clock=clock)  # type: ignore[list-item]


def test_a_state_change_owes_each_sink_one_notification_written_with_it(store_location: StoreLocation) -> None:
    async def scenario() -> None:
        store = await ServiceStore.open(store_location, sinks=("slack", "webhook"))
        try:
            keys = await investigate(store, 2, resolve=1)
            again = await store.accept([note("g0", status="resolved")])  # a resolution heard twice
            assert again[0].action == "ignored"
            rows = await store.outbox_rows()
            assert sorted((r.key, r.sink) for r in rows) == sorted((k, s) for k in keys for s in ("slack", "webhook"))
            assert {r.status for r in rows} == {"pending"} and {r.attempts for r in rows} == {0}
            assert await store.outbox_counts() == {"pending": 6, "sending": 0, "done": 0, "failed": 0}
        finally:
            await store.close()
        plain = await ServiceStore.open(store_location)  # no sink configured: nothing is owed
        try:
            await plain.accept([note("other")])
            assert len(await plain.outbox_rows()) == 6
        finally:
            await plain.close()

    run(scenario)


def test_a_sink_down_for_a_minute_across_a_restart_and_a_sender_killed_mid_post_gets_each_notification_once(
    store_location: StoreLocation,
) -> None:
    clock = FakeClock(START)
    state = {"down": True}
    posts: list[tuple[float, str, int]] = []  # (when, key, status answered)

    def handler(request: httpx.Request) -> httpx.Response:
        status = 500 if state["down"] else 202
        posts.append((clock.now, request.headers[IDEMPOTENCY_HEADER], status))
        return httpx.Response(status)

    async def scenario() -> list[str]:
        store = await ServiceStore.open(store_location, sinks=("webhook",))
        keys = await investigate(store, 3, resolve=1)
        first = sender(store, WebhookNotifier(HOOK, transport=httpx.MockTransport(handler)), clock)
        # each incident's first notification tried once (the sink answers 500); the resolution waits
        # for the message before it
        assert await first.send_due() == 3
        clock.now += 1
        assert await first.send_due() == 0  # the backoff holds: nothing is due for 2 s
        clock.now += 1
        # a sender killed mid-post: it claimed a notification and is never heard from again
        dead = await store.claim_notification(
            owner="gone:1:x", now=clock.now, lease_s=60, max_attempts=12, sinks=["webhook"]
        )
        assert dead is not None and dead.attempts == 2
        await store.close()  # the process stops; another starts on the same store

        store = await ServiceStore.open(store_location, sinks=("webhook",))
        sink = WebhookNotifier(HOOK, transport=httpx.MockTransport(handler))
        again = sender(store, sink, clock)
        try:
            while clock.now < START + 60:  # the sink stays down for a minute
                clock.now += 1
                await again.send_due()
            state["down"] = False
            for _ in range(20):  # the next tries come, at most 5 minutes apart
                clock.now += 30
                await again.send_due()
            rows = await store.outbox_rows()
            assert [r.status for r in rows] == ["done"] * 4
            clock.now += 3600
            assert await again.send_due() == 0  # done is final: nothing is ever sent twice
        finally:
            await sink.aclose()
            await store.close()
        return keys

    keys = run(scenario)
    taken = Counter(key for _, key, status in posts if status == 202)
    assert taken == Counter(keys)  # each notification taken exactly once; none lost
    assert {key for _, key, _ in posts} == set(keys)
    for key in keys:  # the waits between one notification's tries grow, whichever process made them
        times = [when for when, k, _ in posts if k == key]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert len(times) == 1 or (gaps[0] >= 2 and all(b >= a for a, b in itertools.pairwise(gaps))), (key, gaps)
    assert len(posts) < 4 * 12  # backoff, not a retry at every tick


def test_a_sink_that_answers_after_the_client_gave_up_recognises_the_retry_by_its_key_across_a_restart(
    store_location: StoreLocation,
) -> None:
    seen: list[str] = []
    applied: list[str] = []  # what the sink acted on: the first post of each key (it dedups by the key)
    retried: dict[str, asyncio.Event] = {}
    sink_app = FastAPI()

    @sink_app.post("/hook")
    async def hook(request: Request) -> Response:
        key = request.headers[IDEMPOTENCY_HEADER]
        first = key not in seen
        seen.append(key)
        if first:  # acted on, but answered only once the retry shows the client gave up on it
            applied.append(key)
            retried[key] = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(retried[key].wait(), timeout=10)
        else:
            retried[key].set()
        return Response(status_code=202)

    clock = FakeClock(START)

    async def scenario(url: str) -> list[str]:
        store = await ServiceStore.open(store_location, sinks=("webhook",))
        keys = await investigate(store, 3)
        slow = WebhookNotifier(url, timeout_s=0.2)
        try:
            assert await sender(store, slow, clock).send_due() == 3
            assert {r.status for r in await store.outbox_rows()} == {"pending"}  # each timed out: tried again later
        finally:
            await slow.aclose()
            await store.close()
        store = await ServiceStore.open(store_location, sinks=("webhook",))  # restarted
        sink = WebhookNotifier(url, timeout_s=5.0)
        try:
            again = sender(store, sink, clock)
            clock.now += 1
            assert await again.send_due() == 0
            clock.now += 1
            assert await again.send_due() == 3
            assert [(r.status, r.attempts) for r in await store.outbox_rows()] == [("done", 2)] * 3
            clock.now += 3600
            assert await again.send_due() == 0
        finally:
            await sink.aclose()
            await store.close()
        return keys

    with serving(sink_app) as base:
        keys = asyncio.run(scenario(f"{base}/hook"))
    assert sorted(applied) == sorted(keys)  # acted on once per key
    assert Counter(seen) == Counter({k: 2 for k in keys})  # the timed-out post and its retry, no third


def test_two_senders_on_one_store_never_post_one_notification_twice(store_location: StoreLocation) -> None:
    posted: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        posted.append(request.headers[IDEMPOTENCY_HEADER])
        await asyncio.sleep(0.01)
        return httpx.Response(202)

    async def scenario() -> list[str]:
        stores = [await ServiceStore.open(store_location, sinks=("webhook",)) for _ in range(2)]  # two replicas
        try:
            keys = await investigate(stores[0], 12, resolve=4)
            clock = FakeClock(START)
            senders = [sender(s, WebhookNotifier(HOOK, transport=httpx.MockTransport(handler)), clock) for s in stores]
            sent = await asyncio.gather(*(s.send_due() for s in senders))
            assert sum(sent) == len(keys)
            return keys
        finally:
            for s in stores:
                await s.close()

    keys = run(scenario)
    assert Counter(posted) == Counter(keys)


def test_an_incidents_slack_messages_go_in_one_thread_in_the_order_they_were_owed(
    store_location: StoreLocation,
) -> None:
    clock = FakeClock(START)
    bodies: list[dict[str, object]] = []
    answers = iter(
        [
            httpx.Response(500),
            httpx.Response(200, json={"ok": True, "channel": "C1", "ts": "1700000000.000100"}),
            httpx.Response(200, json={"ok": True, "channel": "C1", "ts": "1700000050.000200"}),
        ]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return next(answers)

    async def scenario() -> None:
        store = await ServiceStore.open(store_location, sinks=("slack",))
        slack = SlackNotifier(token="xoxb-t", channel="#oncall", transport=httpx.MockTransport(handler))
        try:
            await investigate(store, 1, resolve=1)
            courier = sender(store, slack, clock)
            assert await courier.send_due() == 1  # the resolution waits for the investigation's message
            clock.now += 2
            assert await courier.send_due() == 2
            rows = await store.outbox_rows()
            assert [(r.status, r.thread) for r in rows] == [
                ("done", "1700000000.000100"),
                ("done", "1700000050.000200"),
            ]
        finally:
            await slack.aclose()
            await store.close()

    run(scenario)
    assert "thread_ts" not in bodies[0] and "thread_ts" not in bodies[1]
    assert bodies[2]["thread_ts"] == "1700000000.000100" and "Resolved:" in str(bodies[2]["text"])


def test_a_refused_notification_is_failed_at_once_and_one_out_of_tries_is_failed_after_its_last(
    store_location: StoreLocation,
) -> None:
    clock = FakeClock(START)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400 if request.headers[IDEMPOTENCY_HEADER].endswith("resolved") else 503)

    async def scenario() -> None:
        store = await ServiceStore.open(store_location, sinks=("webhook",))
        sink = WebhookNotifier(HOOK, transport=httpx.MockTransport(handler))
        try:
            await investigate(store, 1, resolve=1)
            courier = sender(store, sink, clock)
            for _ in range(40):
                clock.now += 300
                await courier.send_due()
            rows = await store.outbox_rows()
            assert [(r.status, r.attempts, r.error) for r in rows] == [
                ("failed", 12, "HTTP 503"),
                ("failed", 1, "HTTP 400"),
            ]
        finally:
            await sink.aclose()
            await store.close()

    run(scenario)


def test_a_sender_started_again_on_a_host_sends_at_once_what_its_killed_predecessor_held(
    store_location: StoreLocation,
) -> None:
    clock = FakeClock(START)
    posted: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        posted.append(request.headers[IDEMPOTENCY_HEADER])
        return httpx.Response(202)

    async def scenario() -> list[str]:
        store = await ServiceStore.open(store_location, sinks=("webhook",))
        sink = WebhookNotifier(HOOK, transport=httpx.MockTransport(handler))
        try:
            keys = await investigate(store, 1)
            earlier_life = f"{socket.gethostname()}:{os.getpid()}:0dead0"  # this pid, killed and started again
            held = await store.claim_notification(
                owner=earlier_life, now=clock.now, lease_s=3600, max_attempts=12, sinks=["webhook"]
            )
            assert held is not None
            courier = sender(store, sink, clock)
            await courier.start()
            for _ in range(200):  # the loop's first look sends it; its lease had an hour to run
                if posted:
                    break
                await asyncio.sleep(0.05)
            await courier.stop()
            assert [(r.status, r.attempts) for r in await store.outbox_rows()] == [("done", 2)]
            return keys
        finally:
            await sink.aclose()
            await store.close()

    assert posted == run(scenario)


def test_a_message_that_cannot_be_built_is_tried_again_later_and_the_others_still_go(
    store_location: StoreLocation,
) -> None:
    clock = FakeClock(START)
    posted: list[str] = []

    class Broken(WebhookNotifier):
        def body(
            self, incident: IncidentRecord, report: Report | None, *, key: str, event: OutboxEvent, thread: str | None
        ) -> dict[str, Any]:
            if incident.service == "broken":
                raise RuntimeError("a bug in the message")
            return super().body(incident, report, key=key, event=event, thread=thread)

    def handler(request: httpx.Request) -> httpx.Response:
        posted.append(request.headers[IDEMPOTENCY_HEADER])
        return httpx.Response(202)

    async def scenario() -> None:
        store = await ServiceStore.open(store_location, sinks=("webhook",))
        sink = Broken(HOOK, transport=httpx.MockTransport(handler))
        try:
            await store.accept([note("g0").model_copy(update={"service": "broken"})])
            keys = await investigate(store, 2)
            assert await sender(store, sink, clock).send_due() == 2
            rows = {r.key: r for r in await store.outbox_rows()}
            assert sorted(posted) == sorted(keys[1:]) and all(rows[k].status == "done" for k in keys[1:])
            assert (rows[keys[0]].status, rows[keys[0]].error) == ("pending", "RuntimeError: a bug in the message")
        finally:
            await sink.aclose()
            await store.close()

    run(scenario)
