"""Several processes on one PostgreSQL store, as a team runs it: two ``opsagent serve`` replicas
behind a load balancer with one of them SIGKILLed mid-load, and ``opsagent worker`` processes
that take over a job whose worker died holding its lease."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fastapi import FastAPI, Request, Response

from opsagent.service.notifier import IDEMPOTENCY_HEADER
from opsagent.service.payload import WebhookPayload
from opsagent.store import NotificationIn, Store, StoreLocation
from tests.conftest import INCIDENTS, ROOT
from tests.service_support import AUTH, TOKEN, free_port, notification, serving, wait_for

GROUPS = 200
NOTIFICATIONS = 2000


def only_postgresql(location: StoreLocation) -> None:
    if location.kind != "postgresql":
        pytest.skip("several hosts share a PostgreSQL store (SQLite's one-host case: test_service_durability)")


@dataclass
class Process:
    """``python -m opsagent.service COMMAND`` on a port of its own, restartable."""

    command: list[str]
    env: dict[str, str]
    log: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        cmd = [sys.executable, "-m", "opsagent.service", *self.command, "--port", str(self.port)]
        cmd += ["--fixtures", str(INCIDENTS), "--log-level", "info"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                cmd, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.base}/readyz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL to the process alone: its investigation processes notice and exit by themselves."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


@contextmanager
def processes(*started: Process) -> Iterator[None]:
    try:
        yield
    finally:
        for p in started:
            p.stop()


def environment(location: StoreLocation, **extra: str) -> dict[str, str]:
    assert location.password is not None
    env = {
        **os.environ,
        "OPSAGENT_STORE_URL": location.url,
        "OPSAGENT_STORE_PASSWORD": location.password.get_secret_value(),
        "OPSAGENT_WEBHOOK_TOKEN": TOKEN,
        **extra,
    }
    env.pop("OPSAGENT_CONFIG", None)
    return env


def body(group: int, started: datetime) -> dict[str, Any]:
    """A notification of ``group``. Its alert matches no recorded incident: the investigation has
    nothing to read and ends at once (inconclusive), so 200 of them take seconds, not minutes."""
    labels = {"alertname": "ReplicaLoad", "service": f"svc-{group}", "cluster": f"c{group}"}
    return {
        "version": "4",
        "groupKey": f'{{}}:{{alertname="ReplicaLoad", cluster="c{group}"}}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "opsagent",
        "groupLabels": {"alertname": "ReplicaLoad", "cluster": f"c{group}"},
        "commonLabels": labels,
        "commonAnnotations": {"summary": f"svc-{group} slow"},
        "externalURL": "http://alertmanager.test:9093",
        "alerts": [
            {
                "status": "firing",
                "labels": labels,
                "annotations": {"summary": "slow"},
                "startsAt": started.isoformat(),
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus.test:9090/graph",
                "fingerprint": f"{group:016x}",
            }
        ],
    }


def accepted_as(payload: dict[str, Any]) -> NotificationIn:
    """A notification as the webhook hands it to the store."""
    parsed = WebhookPayload.model_validate(payload)
    summary = parsed.summary()
    return NotificationIn(
        group_key=parsed.group_key,
        status=parsed.status,
        receiver=parsed.receiver,
        service=summary.service,
        alertname=summary.alertname,
        title=summary.title,
        payload=json.dumps(payload),
        received_at=datetime.now(UTC),
    )


def query(location: StoreLocation, sql: str) -> list[tuple[Any, ...]]:
    assert location.password is not None
    with psycopg.connect(location.url, password=location.password.get_secret_value()) as conn:
        return conn.execute(sql).fetchall()


def test_two_replicas_one_killed_mid_load_lose_nothing_and_investigate_each_group_once_and_notify_it_once(
    tmp_path: Path, store_location: StoreLocation
) -> None:
    only_postgresql(store_location)
    taken: list[str] = []  # the keys of the posts the sink took
    refused: set[str] = set()
    sink = FastAPI()

    @sink.post("/hook")
    async def hook(request: Request) -> Response:
        key = request.headers[IDEMPOTENCY_HEADER]
        if key not in refused:  # every notification's first post fails: its retry is the outbox's
            refused.add(key)
            return Response(status_code=503)
        taken.append(key)
        return Response(status_code=202)

    sink_server = contextlib.ExitStack()  # closed with the replicas, below
    hook_url = sink_server.enter_context(serving(sink)) + "/hook"
    env = environment(
        store_location, OPSAGENT_JOB_LEASE_S="10", OPSAGENT_NOTIFY_WEBHOOK_URL=hook_url, OPSAGENT_NOTIFY_BACKOFF_S="0.2"
    )
    replicas = [Process(["serve", "--workers", "1"], env, tmp_path / f"replica-{n}.log") for n in (0, 1)]
    started = datetime.now(UTC) - timedelta(minutes=5)
    # notification i goes to replica i % 2: every group's notifications reach both, as a clustered
    # Alertmanager delivers them
    bodies = [json.dumps(body(i % GROUPS, started)).encode() for i in range(NOTIFICATIONS)]
    acknowledged: dict[int, int] = {}  # notification index -> the notification id its 202 carried
    requests = 0

    async def send() -> None:
        nonlocal requests
        limits = httpx.Limits(max_connections=40)
        async with httpx.AsyncClient(headers={**AUTH, "content-type": "application/json"}, limits=limits) as client:
            gate = asyncio.Semaphore(20)

            async def deliver(index: int) -> None:
                nonlocal requests
                target = index % 2
                async with gate:
                    while index not in acknowledged:  # resent until acknowledged, as Alertmanager does
                        requests += 1
                        try:
                            answer = await client.post(
                                f"{replicas[target].base}/webhook/alertmanager", content=bodies[index], timeout=10
                            )
                            if answer.status_code == 202:
                                acknowledged[index] = answer.json()["notification_id"]
                                continue
                        except httpx.TransportError:
                            pass
                        target = 1 - target  # the load balancer sends the retry to whichever answers
                        await asyncio.sleep(0.05)

            async def chaos() -> None:  # a third of the way in, replica 0 is killed, then started again
                while len(acknowledged) < NOTIFICATIONS // 3:
                    await asyncio.sleep(0.01)
                replicas[0].kill()
                replicas[0].start()

            await asyncio.gather(chaos(), *(deliver(i) for i in range(NOTIFICATIONS)))

    with sink_server, processes(*replicas):
        for r in replicas:
            r.start()
        for r in replicas:
            wait_for(r.ready, timeout_s=60)
        asyncio.run(send())
        wait_for(replicas[0].ready, timeout_s=60)

        def drained() -> bool:
            with Store(store_location) as store:
                counts = store.job_counts()
            owed = query(store_location, "SELECT COUNT(*) FROM outbox WHERE status IN ('pending', 'sending')")
            return counts["queued"] + counts["running"] == 0 and owed == [(0,)]

        wait_for(drained, timeout_s=240, every_s=0.5)
    logs = "".join(r.log.read_text() for r in replicas)
    assert len(acknowledged) == NOTIFICATIONS and requests > NOTIFICATIONS  # the kill cut some requests off
    stored = {row[0] for row in query(store_location, "SELECT id FROM notifications")}
    assert set(acknowledged.values()) <= stored, "an acknowledged notification was lost"
    incidents = query(store_location, "SELECT group_key, COUNT(*) FROM incidents GROUP BY group_key")
    assert len(incidents) == GROUPS and {n for _, n in incidents} == {1}, "a group opened more than one incident"
    jobs = query(store_location, "SELECT status, COUNT(*), COUNT(DISTINCT incident_id) FROM jobs GROUP BY status")
    assert jobs == [("done", GROUPS, GROUPS)], (jobs, logs[-3000:])
    assert query(store_location, "SELECT COUNT(*) FROM investigations") == [(GROUPS,)]
    owed = {row[0] for row in query(store_location, "SELECT notify_key FROM outbox WHERE status = 'done'")}
    assert len(owed) == GROUPS and set(taken) == owed  # every incident's notification delivered, none lost
    # a post the kill cut off after the sink took it is sent again under its key: at most the
    # sender's few posts in flight at that moment
    assert len(taken) - len(owed) <= 4, sorted(k for k in owed if taken.count(k) > 1)
    assert '"event": "service.start"' in logs and "Traceback" not in logs


def test_a_job_whose_worker_dies_holding_its_lease_is_finished_by_another_worker(
    tmp_path: Path, store_location: StoreLocation
) -> None:
    only_postgresql(store_location)
    lease_s = 4.0
    env = environment(store_location, OPSAGENT_JOB_LEASE_S=str(lease_s))
    first = Process(["worker", "--workers", "1"], env, tmp_path / "worker-1.log")
    second = Process(["worker", "--workers", "1"], env, tmp_path / "worker-2.log")
    with processes(first, second):
        first.start()
        wait_for(first.ready, timeout_s=60)
        alert = notification()  # the order-service incident: a real investigation, a second or so
        with Store(store_location) as store:
            incident = store.accept([accepted_as(alert)])[0].incident_id
        wait_for(lambda: query(store_location, "SELECT 1 FROM jobs WHERE status = 'running'"), every_s=0.02)
        first.signal(signal.SIGSTOP)  # it holds the lease and can neither renew it nor finish
        time.sleep(0.2)
        held = query(store_location, "SELECT owner, lease_until FROM jobs")
        # the other worker starts while the first still lives: nothing is an orphan to it, only a
        # lease that runs out is
        second.start()
        wait_for(second.ready, timeout_s=60)
        first.kill()
        killed_at = time.time()

        def taken_over() -> list[tuple[Any, ...]]:
            return query(store_location, "SELECT owner, attempts, status FROM jobs")

        def done() -> bool:
            return taken_over()[0][2] == "done"

        wait_for(done, timeout_s=60, every_s=0.1)
        finished_at = time.time()
    owner, attempts, status = taken_over()[0]
    first_owner, lease_until = held[0]
    assert status == "done" and attempts == 2 and owner != first_owner
    assert finished_at >= lease_until, "taken over before the dead worker's lease ran out"
    assert killed_at < finished_at
    with Store(store_location) as store:
        record = store.incident(incident or "")
        assert record is not None and record.investigation == "done" and store.has_report(record.id)
    log = second.log.read_text()
    assert '"attempt": 2' in log and '"event": "job.done"' in log
    assert '"event": "queue.resumed"' not in log  # taken after the lease ran out, not as an orphan
