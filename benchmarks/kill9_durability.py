"""kill -9 durability of the webhook service: notifications sent while the service is killed with
SIGKILL, restarted, and sent to again until each is acknowledged, as Alertmanager does; and the
notifications the service owes its sink, delivered through the outbox while the sink is down.

    python benchmarks/kill9_durability.py [--notifications 200] [--groups 20] [--concurrency 10]
                                          [--kills 2] [--runs 3] [--workers 2]
                                          [--store sqlite|postgresql] [--sink-down-s 60] [--sink-slow]

Each run starts ``opsagent serve`` (worker processes, replay sources from fixtures/incidents) on a
free loopback port with a fresh data directory and sends ``--notifications`` notifications of
``--groups`` alert groups, ``--concurrency`` in flight. Each carries a sequence number of its own
(an extra field, kept in the stored payload). The service is killed with SIGKILL ``--kills`` times,
spread over the run, while requests are in flight, and started again at once; a sender whose
request failed (connection refused or reset, or a 503) sends the same notification again after a
short wait, until a 202 acknowledges it. At the end the service finishes its investigations and is
stopped; the store is read. Per run it prints:

- sent: distinct notifications; requests: HTTP requests made, retries included;
- acknowledged: notifications answered 202; persisted: notifications found in the store;
- lost: acknowledged but not in the store (the guarantee: 0);
- duplicated: stored more than once (a notification stored whose 202 the kill cut off, sent again:
  Alertmanager's retries are at-least-once, the store's dedup by alert group keeps them from
  opening a second incident);
- incidents (one per alert group expected) and investigations done / failed;
- the generic-webhook sink (a loopback server here) is down, answering 500, for ``--sink-down-s``
  seconds from the start of the run, kills included; with ``--sink-slow`` it answers each key's
  first post only after the service's 5 s client timeout (it has taken it: the retry is a duplicate
  it recognises by the ``Idempotency-Key``). owed: notifications the outbox holds (one per incident);
  delivered: keys the sink answered 2xx; unsent: owed, never delivered (the guarantee: 0); twice: keys
  the sink answered 2xx more than once (a post whose answer the client never saw: a kill mid-post,
  or the slow sink; each recognisable by its key); posts: every post, retries included.

PostgreSQL (``--store postgresql``) is a throwaway server started as the tests start it
(``tests/postgres_server.py``, fsync on).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import uvicorn
from fastapi import FastAPI, Request, Response
from pydantic import SecretStr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.webhook_load import WEBHOOK, free_port, payload, wait_ready  # noqa: E402
from opsagent.service.notifier import IDEMPOTENCY_HEADER  # noqa: E402
from opsagent.store import StoreLocation  # noqa: E402
from tests import postgres_server  # noqa: E402

SEQUENCE = "opsagentBenchSequence"


@dataclass
class Tally:
    requests: int = 0
    refused: int = 0  # requests the kill (or the restart) cut off: connection errors, 503
    acknowledged: set[int] = field(default_factory=set)


class Service:
    """``opsagent serve`` as a child process that can be killed and started again on the same port."""

    def __init__(self, *, data: Path, token: str, workers: int, fixtures: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "OPSAGENT_DATA_DIR": str(data), "OPSAGENT_WEBHOOK_TOKEN": token, **env}
        self.env.pop("OPSAGENT_CONFIG", None)
        self.cmd = [sys.executable, "-m", "opsagent.service", "serve", "--port", str(self.port)]
        self.cmd += ["--workers", str(workers), "--fixtures", str(fixtures), "--log-level", "warning"]
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, env=self.env, start_new_session=True)
        async with httpx.AsyncClient(base_url=self.base, timeout=2) as probe:
            await wait_ready(probe, self.proc)

    def kill(self) -> None:
        """SIGKILL to the service process alone: its worker processes notice and exit by themselves."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


async def _send(base: str, token: str, bodies: dict[int, bytes], concurrency: int, tally: Tally) -> None:
    """Every notification until it is acknowledged, ``concurrency`` at a time."""
    queue = list(bodies)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    async def sender() -> None:
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=10) as client:
            while queue:
                sequence = queue.pop(0)
                while True:
                    tally.requests += 1
                    try:
                        response = await client.post(WEBHOOK, content=bodies[sequence])
                    except httpx.TransportError:
                        response = None
                    if response is not None and response.status_code == 202:
                        tally.acknowledged.add(sequence)
                        break
                    tally.refused += 1
                    await asyncio.sleep(0.2)  # Alertmanager backs off, then sends the same notification again

    await asyncio.gather(*(sender() for _ in range(concurrency)))


def query(location: StoreLocation, sql: str) -> list[tuple[object, ...]]:
    """Rows of the store as its file or its server holds them (read beside the service, not through it)."""
    if location.kind == "sqlite":
        db = sqlite3.connect(f"file:{location.path}?mode=ro", uri=True)
        try:
            return db.execute(sql).fetchall()
        finally:
            db.close()
    password = location.password.get_secret_value() if location.password is not None else None
    with psycopg.connect(location.url, password=password) as conn:
        return conn.execute(sql).fetchall()


def stored_sequences(location: StoreLocation) -> list[int]:
    """The sequence number of every notification in the store."""
    rows = query(location, "SELECT payload FROM notifications")
    return [n for (text,) in rows if isinstance(text, str) and isinstance(n := json.loads(text).get(SEQUENCE), int)]


class Sink:
    """The generic-webhook sink on loopback: down (500) until ``up_at``, then it takes every post;
    ``slow``: a key's first post taken is answered only after the service's client gave up on it."""

    def __init__(self, *, down_s: float, slow: bool) -> None:
        self.up_at = time.monotonic() + down_s
        self.slow = slow
        self.posts: list[tuple[str, int]] = []  # (key, status answered)
        self.port = free_port()
        app = FastAPI()
        app.post("/hook")(self.hook)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def hook(self, request: Request) -> Response:
        key = request.headers.get(IDEMPOTENCY_HEADER, "")
        if time.monotonic() < self.up_at:
            self.posts.append((key, 500))
            return Response(status_code=500)
        first = all(k != key or status >= 300 for k, status in self.posts)
        self.posts.append((key, 202))
        if first and self.slow:
            await asyncio.sleep(6.0)  # past the service's 5 s timeout
        return Response(status_code=202)

    def __enter__(self) -> Sink:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


async def run(args: argparse.Namespace, location: StoreLocation, data: Path) -> dict[str, int]:
    token = secrets.token_urlsafe(24)
    sink = Sink(down_s=args.sink_down_s, slow=args.sink_slow).__enter__()
    env = {"OPSAGENT_STORE_URL": location.url, "OPSAGENT_NOTIFY_WEBHOOK_URL": sink.url}
    if location.password is not None:
        env["OPSAGENT_STORE_PASSWORD"] = location.password.get_secret_value()
    service = Service(data=data, token=token, workers=args.workers, fixtures=args.fixtures, env=env)
    started = datetime.now(UTC) - timedelta(minutes=5)
    bodies = {}
    for i in range(args.notifications):
        body = payload(i % args.groups, i, started, args.groups)
        body[SEQUENCE] = i
        bodies[i] = json.dumps(body).encode()
    tally = Tally()
    kills = 0
    try:
        await service.start()
        sending = asyncio.create_task(_send(service.base, token, bodies, args.concurrency, tally))
        for k in range(1, args.kills + 1):  # spread over the run, while notifications are in flight
            threshold = args.notifications * k // (args.kills + 1)
            while len(tally.acknowledged) < threshold and not sending.done():
                await asyncio.sleep(0.001)
            if sending.done():
                break
            service.kill()
            kills += 1
            await service.start()
        await sending
        async with httpx.AsyncClient(base_url=service.base, timeout=5) as probe:
            deadline = time.monotonic() + args.drain_s
            while time.monotonic() < deadline:  # the investigations the kills interrupted, resumed
                counts = (await probe.get("/readyz")).json()
                if counts.get("queued") == 0 and counts.get("running") == 0:
                    break
                await asyncio.sleep(0.5)
            deadline = time.monotonic() + args.sink_down_s + args.drain_s
            while time.monotonic() < deadline:  # the notifications, through the sink's outage
                owed = query(location, "SELECT COUNT(*) FROM outbox WHERE status IN ('pending', 'sending')")
                if owed == [(0,)]:
                    break
                await asyncio.sleep(0.5)
    finally:
        service.stop()
        sink.__exit__()
    persisted: dict[int, int] = {}
    for sequence in stored_sequences(location):
        persisted[sequence] = persisted.get(sequence, 0) + 1
    incidents = query(location, "SELECT id, group_key FROM incidents")
    jobs = dict(query(location, "SELECT status, COUNT(*) FROM jobs GROUP BY status"))
    outbox = dict(query(location, "SELECT status, COUNT(*) FROM outbox GROUP BY status"))
    owed = {str(k) for (k,) in query(location, "SELECT notify_key FROM outbox")}
    taken: dict[str, int] = {}
    for key, status in sink.posts:
        if status < 300:
            taken[key] = taken.get(key, 0) + 1
    return {
        "sent": len(bodies),
        "requests": tally.requests,
        "refused": tally.refused,
        "acknowledged": len(tally.acknowledged),
        "persisted": len(persisted),
        "lost": len(tally.acknowledged - set(persisted)),
        "duplicated": sum(n - 1 for n in persisted.values()),
        "kills": kills,
        "incidents": len(incidents),
        "groups": len({g for _, g in incidents}),
        "done": int(jobs.get("done", 0)),
        "failed": int(jobs.get("failed", 0)),
        "pending": int(jobs.get("queued", 0)) + int(jobs.get("running", 0)),
        "owed": len(owed),
        "delivered": len(owed & set(taken)),
        "unsent": len(owed - set(taken)),
        "twice": sum(1 for n in taken.values() if n > 1),
        "posts": len(sink.posts),
        "outbox_failed": int(outbox.get("failed", 0)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notifications", type=int, default=200)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--drain-s", type=float, default=120.0, help="time allowed for the investigations to end")
    parser.add_argument("--fixtures", type=Path, default=ROOT / "fixtures" / "incidents")
    parser.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--sink-down-s", type=float, default=60.0, help="the sink answers 500 this long from the start")
    parser.add_argument("--sink-slow", action="store_true", help="each key's first post answered after the timeout")
    args = parser.parse_args()
    print(
        f"{args.notifications} notifications of {args.groups} alert groups, {args.concurrency} in flight, "
        f"{args.kills} SIGKILL(s) of the service per run, {args.workers} investigation workers, loopback, "
        f"{args.store}; the sink down {args.sink_down_s:g} s{', then slow' if args.sink_slow else ''}"
    )
    columns = ["run", "sent", "requests", "acknowledged", "persisted", "lost", "duplicated", "kills"]
    columns += ["incidents", "done", "failed", "pending"]
    sunk = ["owed", "delivered", "unsent", "twice", "posts", "outbox_failed"]
    print("  ".join(f"{c:>12}" for c in columns) + "  | sink: " + "  ".join(f"{c:>9}" for c in sunk))
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(postgres_server.postgres(durable=True)) if args.store == "postgresql" else None
        for number in range(1, args.runs + 1):
            data = Path(tempfile.mkdtemp(prefix="opsagent-kill9-"))
            if server is None:
                location = StoreLocation.sqlite(data / "opsagent.db")
            else:
                url = server.create_schema(f"kill9_{number}_{secrets.token_hex(4)}")
                location = StoreLocation(url=url, password=SecretStr(postgres_server.PASSWORD))
            row = asyncio.run(run(args, location, data))
            cells = "  ".join(f"{v:>12}" for v in [number, *(row[c] for c in columns[1:])])
            print(cells + "  |       " + "  ".join(f"{row[c]:>9}" for c in sunk), flush=True)
            if row["groups"] != args.groups or row["incidents"] != args.groups:
                print(f"             {row['incidents']} incidents for {row['groups']} of {args.groups} groups")


if __name__ == "__main__":
    main()
