"""kill -9 durability of the webhook service: notifications sent while the service is killed with
SIGKILL, restarted, and sent to again until each is acknowledged, as Alertmanager does.

    python benchmarks/kill9_durability.py [--notifications 200] [--groups 20] [--concurrency 10]
                                          [--kills 2] [--runs 3] [--workers 2]

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
- incidents (one per alert group expected) and investigations done / failed.
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
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.webhook_load import WEBHOOK, free_port, payload, wait_ready  # noqa: E402
from opsagent.store import Store  # noqa: E402

SEQUENCE = "opsagentBenchSequence"


@dataclass
class Tally:
    requests: int = 0
    refused: int = 0  # requests the kill (or the restart) cut off: connection errors, 503
    acknowledged: set[int] = field(default_factory=set)


class Service:
    """``opsagent serve`` as a child process that can be killed and started again on the same port."""

    def __init__(self, *, data: Path, token: str, workers: int, fixtures: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "OPSAGENT_DATA_DIR": str(data), "OPSAGENT_WEBHOOK_TOKEN": token}
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


def stored_sequences(database: Path) -> list[int]:
    """The sequence number of every notification in the store, read as the file holds them."""
    db = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT payload FROM notifications").fetchall()
    finally:
        db.close()
    return [n for (text,) in rows if isinstance(n := json.loads(text).get(SEQUENCE), int)]


async def run(args: argparse.Namespace) -> dict[str, int]:
    data = Path(tempfile.mkdtemp(prefix="opsagent-kill9-"))
    token = secrets.token_urlsafe(24)
    service = Service(data=data, token=token, workers=args.workers, fixtures=args.fixtures)
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
    finally:
        service.stop()
    persisted: dict[int, int] = {}
    for sequence in stored_sequences(data / "opsagent.db"):
        persisted[sequence] = persisted.get(sequence, 0) + 1
    with Store(data / "opsagent.db") as store:
        incidents = store.incidents(limit=100_000)
        jobs = store.job_counts()
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
        "groups": len({i.group_key for i in incidents}),
        "done": jobs["done"],
        "failed": jobs["failed"],
        "pending": jobs["queued"] + jobs["running"],
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
    args = parser.parse_args()
    print(
        f"{args.notifications} notifications of {args.groups} alert groups, {args.concurrency} in flight, "
        f"{args.kills} SIGKILL(s) of the service per run, {args.workers} investigation workers, loopback"
    )
    columns = ["run", "sent", "requests", "acknowledged", "persisted", "lost", "duplicated", "kills"]
    columns += ["incidents", "done", "failed", "pending"]
    print("  ".join(f"{c:>12}" for c in columns))
    for number in range(1, args.runs + 1):
        row = asyncio.run(run(args))
        print("  ".join(f"{v:>12}" for v in [number, *(row[c] for c in columns[1:])]), flush=True)
        if row["groups"] != args.groups or row["incidents"] != args.groups:
            print(f"             {row['incidents']} incidents for {row['groups']} of {args.groups} groups")


if __name__ == "__main__":
    main()
