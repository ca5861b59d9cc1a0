"""Load the webhook service with Alertmanager notifications and measure how fast it accepts them.

    python benchmarks/webhook_load.py [--notifications 2000] [--concurrency 50] [--groups 200]
                                      [--rate PER_S] [--clients 2] [--workers 2]
                                      [--client aiohttp|httpx]
                                      [--store sqlite|postgresql|postgresql://user@host/db] [--replicas N]
                                      [--jobs 60 --job-workers 1,2] [--matrix]

Starts ``opsagent serve`` (worker processes, replay sources from fixtures/incidents) on a free
loopback port with a temporary data directory, warms it up, then sends the notifications with at
most ``--concurrency`` in flight: one keep-alive connection per sender, the senders spread over
``--clients`` processes. The load generator runs on the same cores as the service, so it should
cost as little as it can (as Alertmanager's Go client does): aiohttp by default (the ``bench``
extra); ``--client httpx`` spends about 0.7 ms of CPU per request and measures itself as much as
the service. Closed loop by default (a sender sends again as
soon as it is answered); ``--rate`` paces them instead. Prints accepted/s, p50/p99/max accept
latency as the client saw it, the service's own accept histogram, how many notifications are
persisted (counted in the store), how many duplicates were collapsed into an open incident, and the
investigations' state. Each of the ``--groups`` groups opens one incident, whose investigation (the
order-service recorded incident) runs in a worker process while the rest of the load arrives.

``--store``: the SQLite file (default); ``postgresql``, a throwaway PostgreSQL server this script
starts (Debian's postgresql, fsync on, as tests/postgres_server.py makes it); or the URL of a
server of your own (the password in OPSAGENT_STORE_PASSWORD). ``--replicas N`` starts N replicas on
the one store and spreads the client processes over them, every group's notifications reaching
each replica (as a clustered Alertmanager delivers them); the ``--workers`` investigation workers
are shared out among the replicas (2 replicas of ``--workers 2`` run one each), so every row runs as
many investigations at once on the same cores. Lost (acknowledged, not stored) and
duplicated (a second incident for a group) are counted in the store.

``--jobs J`` measures the investigations' throughput instead: J alert groups are accepted by one
``serve --no-workers`` replica while ``opsagent worker`` processes (``--job-workers``: how many, one
investigation each) drain the queue; prints jobs/min from the first accept to the last job done.

``--matrix`` runs the table docs/benchmarks/webhook-load.md shows, in one run: SQLite with 1 replica, PostgreSQL with 1
and 2 replicas, then jobs/min with 1 and 2 worker processes on PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from multiprocessing import get_context
from multiprocessing.connection import Connection
from pathlib import Path
from statistics import quantiles
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from opsagent.store import Store, StoreLocation  # noqa: E402

FIXTURE = "order-service-threadpool-config"
WEBHOOK = "/webhook/alertmanager"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def payload(group: int, sequence: int, started: datetime, groups: int) -> dict[str, Any]:
    """A notification of ``group``, as Alertmanager sends it: every alert of the group that fires,
    each keeping its start time from one notification to the next. The group's first notification
    has one pod's alert; later ones add the pods that began firing since (30 s apart)."""
    labels = {
        "alertname": "OrderServiceHighLatency",
        "service": "order-service",
        "severity": "page",
        "cluster": f"c{group}",
        "opsagent_fixture": FIXTURE,
    }
    pods = 1 + min(sequence // groups, 2)
    return {
        "version": "4",
        "groupKey": f'{{}}:{{alertname="OrderServiceHighLatency", cluster="c{group}"}}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "opsagent",
        "groupLabels": {"alertname": "OrderServiceHighLatency", "cluster": f"c{group}"},
        "commonLabels": labels,
        "commonAnnotations": {"summary": f"order-service p99 latency 2.25s (cluster c{group})"},
        "externalURL": "http://alertmanager.example:9093",
        "alerts": [
            {
                "status": "firing",
                "labels": {**labels, "pod": f"order-service-{pod}"},
                "annotations": {"summary": "order-service p99 latency 2.25s"},
                "startsAt": (started + timedelta(seconds=30 * pod)).isoformat(),
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus.example:9090/graph",
                "fingerprint": f"{group:013x}{pod:03x}",
            }
            for pod in range(pods)
        ],
    }


async def wait_ready(client: httpx.AsyncClient, proc: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the service exited with {proc.returncode}")
        try:
            if (await client.get("/readyz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.1)
    raise SystemExit("the service did not become ready")


Exchange = Callable[[bytes], Awaitable[tuple[int, bytes]]]


@asynccontextmanager
async def _connections(kind: str, base: str, token: str, n: int) -> AsyncIterator[list[Exchange]]:
    """``n`` senders, each with one keep-alive connection of its own (as Alertmanager's are): a
    function posting one notification and returning the status and body."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if kind == "httpx":
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        clients = [httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=30) for _ in range(n)]

        def via_httpx(client: httpx.AsyncClient) -> Exchange:
            async def post(body: bytes) -> tuple[int, bytes]:
                response = await client.post(WEBHOOK, content=body)
                return response.status_code, response.content

            return post

        try:
            await asyncio.gather(*(c.get("/healthz") for c in clients))  # connected, lazy imports done
            yield [via_httpx(c) for c in clients]
        finally:
            for client in clients:
                await client.aclose()
        return
    import aiohttp  # the bench extra

    sessions = [aiohttp.ClientSession(base, headers=headers, connector=aiohttp.TCPConnector(limit=1)) for _ in range(n)]

    def via_aiohttp(session: aiohttp.ClientSession) -> Exchange:
        async def post(body: bytes) -> tuple[int, bytes]:
            async with session.post(WEBHOOK, data=body) as response:
                return response.status, await response.read()

        return post

    try:
        for session in sessions:
            async with session.get("/healthz") as response:
                await response.read()
        yield [via_aiohttp(s) for s in sessions]
    finally:
        for session in sessions:
            await session.close()


async def _send(
    kind: str, base: str, token: str, bodies: list[bytes], concurrency: int, rate: float | None, start_at: float
) -> dict[str, Any]:
    """``concurrency`` senders; each connects and makes one untimed request first, then all start
    together at ``start_at``."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    actions: dict[str, int] = {}
    queue = iter(enumerate(bodies))
    async with _connections(kind, base, token, concurrency) as senders:
        await asyncio.sleep(max(start_at - time.time(), 0))
        cpu = time.process_time()
        began = time.perf_counter()

        async def sender(post: Exchange) -> None:
            for index, body in queue:
                if rate is not None:  # paced: the i-th notification is due at i / rate
                    await asyncio.sleep(max(began + index / rate - time.perf_counter(), 0))
                started = time.perf_counter()
                status, content = await post(body)
                latencies.append(time.perf_counter() - started)
                statuses[status] = statuses.get(status, 0) + 1
                if status == 202:
                    action = json.loads(content)["action"]
                    actions[action] = actions.get(action, 0) + 1

        await asyncio.gather(*(sender(post) for post in senders))
        ended = time.perf_counter()
        cpu = time.process_time() - cpu
    return {
        "latencies": latencies,
        "statuses": statuses,
        "actions": actions,
        "began": began,
        "ended": ended,
        "cpu": cpu,
    }


def _client(
    kind: str,
    base: str,
    token: str,
    bodies: list[bytes],
    concurrency: int,
    rate: float | None,
    start_at: float,
    out: Connection,
) -> None:
    """One client process: sends its share from the common start, reports back."""
    with contextlib.suppress(ImportError):
        import uvloop  # a runtime dependency of the service; the clients use it too

        uvloop.install()
    out.send(asyncio.run(_send(kind, base, token, bodies, concurrency, rate, start_at)))
    out.close()


def load(
    bases: list[str],
    token: str,
    *,
    total: int,
    concurrency: int,
    groups: int,
    clients: int,
    rate: float | None,
    client: str = "aiohttp",
    first_group: int = 0,
) -> dict[str, Any]:
    """``total`` notifications, at most ``concurrency`` in flight, from ``clients`` processes (one
    Python client cannot keep 50 requests in flight fast enough to measure the server rather than
    itself). Without ``rate`` each sender sends its next as soon as the last is answered (saturation);
    with it, notifications are due at a steady ``rate`` per second."""
    started = datetime.now(UTC) - timedelta(minutes=5)
    bodies = [json.dumps(payload(first_group + i % groups, i, started, groups)).encode() for i in range(total)]
    # client process k sends to replica k % replicas; notification i goes to client (i + i // groups): each
    # round over the groups moves to the next client, so every group's notifications reach every replica
    shares: list[list[bytes]] = [[] for _ in range(clients)]
    for i, body in enumerate(bodies):
        shares[(i + i // groups) % clients].append(body)
    ctx = get_context("spawn")
    start_at = time.time() + 4.0  # every client process imported, connected and warm by then
    pipes, procs = [], []
    for k in range(clients):
        share = concurrency // clients + (1 if k < concurrency % clients else 0)
        reader, writer = ctx.Pipe(duplex=False)
        paced = rate / clients if rate else None
        proc = ctx.Process(
            target=_client, args=(client, bases[k % len(bases)], token, shares[k], share, paced, start_at, writer)
        )
        proc.start()
        pipes.append(reader)
        procs.append(proc)
    parts = [r.recv() for r in pipes]
    for proc in procs:
        proc.join()
    merged: dict[str, Any] = {"latencies": [], "statuses": {}, "actions": {}}
    for part in parts:
        merged["latencies"] += part["latencies"]
        for key in ("statuses", "actions"):
            for k, v in part[key].items():
                merged[key][k] = merged[key].get(k, 0) + v
    merged["elapsed"] = max(p["ended"] for p in parts) - min(p["began"] for p in parts)
    merged["client_cpu"] = sum(p["cpu"] for p in parts)
    return merged


def server_side(metrics: str) -> str:
    """The service's own accept histogram (validate + durable store), as share under each bound."""
    buckets: list[tuple[float, float]] = []
    for line in metrics.splitlines():
        if line.startswith("opsagent_webhook_accept_seconds_bucket"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float(bound), float(line.rsplit(" ", 1)[1])))
    total = buckets[-1][1] if buckets else 0
    shown = [f"{c / total:.1%} ≤ {b * 1000:g} ms" for b, c in buckets if b in (0.005, 0.01, 0.025, 0.05)]
    return ", ".join(shown) + " (opsagent_webhook_accept_seconds, warm-up included)" if total else "n/a"


@dataclass
class Replica:
    """``opsagent COMMAND`` as a child process on a port of its own."""

    command: list[str]
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        cmd = [sys.executable, "-m", "opsagent.service", *self.command, "--port", str(self.port)]
        self.proc = subprocess.Popen([*cmd, "--log-level", "warning"], cwd=ROOT, env=self.env)

    async def ready(self) -> None:
        assert self.proc is not None
        async with httpx.AsyncClient(base_url=self.base, timeout=5) as probe:
            await wait_ready(probe, self.proc, timeout_s=60)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def store_for(spec: str, data: Path) -> Iterator[StoreLocation]:
    """The store the run uses: the SQLite file, a throwaway PostgreSQL server, or the user's."""
    if spec == "sqlite":
        yield StoreLocation.sqlite(data / "opsagent.db")
    elif spec == "postgresql":
        from pydantic import SecretStr

        from tests.postgres_server import PASSWORD, postgres

        with postgres(durable=True) as server:
            yield StoreLocation(url=server.url, password=SecretStr(PASSWORD))
    else:
        from pydantic import SecretStr

        secret = os.environ.get("OPSAGENT_STORE_PASSWORD")
        yield StoreLocation(url=spec, password=SecretStr(secret) if secret else None)


def service_env(location: StoreLocation, data: Path, token: str, *, correlation: bool = False) -> dict[str, str]:
    env = {
        **os.environ,
        "OPSAGENT_DATA_DIR": str(data),
        "OPSAGENT_WEBHOOK_TOKEN": token,
        "OPSAGENT_CONFIG": "",
        "OPSAGENT_STORE_URL": location.url,
        # off, as the published table was measured; on, each group (one cluster each) is a storm of its own
        "OPSAGENT_CORRELATION__ENABLED": "true" if correlation else "false",
    }
    if location.password is not None:
        env["OPSAGENT_STORE_PASSWORD"] = location.password.get_secret_value()
    return env


def counted(location: StoreLocation) -> dict[str, int]:
    """What the store holds: notifications, incidents, groups with more than one incident, jobs by state."""
    with Store(location) as store:
        jobs = store.job_counts()
        incidents = store.incidents(limit=1_000_000)
        by_group: dict[str, int] = {}
        for incident in incidents:
            by_group[incident.group_key] = by_group.get(incident.group_key, 0) + 1
        return {
            "persisted": store.notification_count(),
            "incidents": len(incidents),
            "duplicated": sum(n - 1 for n in by_group.values()),
            **jobs,
        }


async def accept_run(args: argparse.Namespace, location: StoreLocation, data: Path, replicas: int) -> dict[str, Any]:
    token = secrets.token_urlsafe(24)
    env = service_env(location, data, token, correlation=args.correlation)
    # the investigation workers are shared out: N replicas run as many investigations at once as one
    each = max(args.workers // replicas, 1)
    started = [
        Replica(["serve", "--workers", str(each), "--fixtures", str(args.fixtures)], env) for _ in range(replicas)
    ]
    try:
        for replica in started:
            replica.start()
        for replica in started:
            await replica.ready()
        bases = [r.base for r in started]
        shape = {
            "concurrency": args.concurrency,
            "groups": args.groups,
            "clients": max(args.clients, replicas),
            "rate": args.rate,
            "client": args.client,
        }
        load(bases, token, total=args.warmup, first_group=10**6, **shape)  # warm up, on groups of its own
        result = load(bases, token, total=args.notifications, **shape)
        async with httpx.AsyncClient(base_url=bases[0], timeout=5) as probe:
            result["server"] = (await probe.get("/metrics", headers={"Authorization": f"Bearer {token}"})).text
        result["jobs_at_end"] = counted(location)  # read while the service runs (WAL: readers never wait)
    finally:
        for replica in started:
            replica.stop()
    result["stored"] = counted(location)
    return result


async def jobs_run(args: argparse.Namespace, location: StoreLocation, data: Path, workers: int) -> dict[str, Any]:
    """J groups accepted by a web-only replica, drained by ``workers`` worker processes."""
    token = secrets.token_urlsafe(24)
    env = service_env(location, data, token)
    web = Replica(["serve", "--no-workers"], env)
    pool = [Replica(["worker", "--workers", "1", "--fixtures", str(args.fixtures)], env) for _ in range(workers)]
    first_group = 10**7 + workers * 10**5  # groups of this run's own
    try:
        for process in (web, *pool):
            process.start()
        for process in (web, *pool):
            await process.ready()
        before = counted(location)
        began = time.perf_counter()
        load(
            [web.base],
            token,
            total=args.jobs,
            groups=args.jobs,
            concurrency=10,
            clients=1,
            rate=None,
            client=args.client,
            first_group=first_group,
        )
        while True:
            now = counted(location)
            if now["done"] + now["failed"] - before["done"] - before["failed"] >= args.jobs:
                break
            await asyncio.sleep(0.2)
        elapsed = time.perf_counter() - began
    finally:
        for process in (web, *pool):
            process.stop()
    return {"workers": workers, "jobs": args.jobs, "elapsed": elapsed, "failed": now["failed"] - before["failed"]}


def p99(latencies: list[float]) -> tuple[float, float]:
    cuts = quantiles(sorted(latencies), n=100, method="inclusive")
    return cuts[49], cuts[98]


def report_accept(args: argparse.Namespace, replicas: int, result: dict[str, Any]) -> None:
    lat = sorted(result["latencies"])
    p50, p99_ = p99(lat)
    accepted = result["statuses"].get(202, 0)
    sent = args.warmup + args.notifications
    stored, jobs = result["stored"], result["jobs_at_end"]
    lost = max(sent - stored["persisted"], 0)
    print(
        f"notifications {args.notifications} (+{args.warmup} warm-up) · concurrency {args.concurrency} "
        f"({max(args.clients, replicas)} client processes, {args.client}) · {args.groups} alert groups · "
        f"store {args.store} · {replicas} replica(s) · correlation {'on' if args.correlation else 'off'} · "
        f"{max(args.workers // replicas, 1) * replicas} investigation "
        "workers in all · loopback · "
        + (f"paced at {args.rate:g}/s" if args.rate else "closed loop (each sender sends again once answered)")
    )
    print(f"accepted        {accepted}/{args.notifications}  (statuses: {result['statuses']})")
    print(f"accepted/s      {accepted / result['elapsed']:.0f}")
    print(f"accept latency  p50 {p50 * 1000:.1f} ms · p99 {p99_ * 1000:.1f} ms · max {lat[-1] * 1000:.1f} ms")
    print(
        f"clients' CPU    {result['client_cpu']:.2f} s over {result['elapsed']:.2f} s "
        "(the load generator shares the machine's cores with the service)"
    )
    print(f"server side     {server_side(result['server'])} (replica 1)")
    print(f"persisted       {stored['persisted']}/{sent} notifications in the store (warm-up included); lost {lost}")
    print(
        f"duplicates      {result['actions'].get('updated', 0)} collapsed into an open incident; "
        f"{result['actions'].get('opened', 0)} opened one ({args.groups} groups; {stored['incidents']} incidents "
        f"in all, warm-up included; {stored['duplicated']} duplicated)"
    )
    print(
        f"investigations  {jobs['done']} done, {jobs['running']} running, {jobs['queued']} queued "
        f"when the load ended ({jobs['failed']} failed)"
    )
    if stored["persisted"] != sent or accepted != args.notifications or stored["duplicated"]:
        raise SystemExit("FAIL: a notification was refused, not persisted, or opened a second incident")


def report_jobs(args: argparse.Namespace, result: dict[str, Any]) -> None:
    per_min = result["jobs"] / result["elapsed"] * 60
    print(
        f"investigations  {result['jobs']} jobs (the order-service recorded incident) · store {args.store} · "
        f"{result['workers']} `opsagent worker` process(es), one investigation each · "
        f"{result['elapsed']:.1f} s from the first accept to the last done · {per_min:.0f} jobs/min "
        f"({result['failed']} failed)"
    )


async def main(args: argparse.Namespace) -> None:
    if args.matrix:
        await matrix(args)
        return
    data = Path(tempfile.mkdtemp(prefix="opsagent-bench-"))
    with store_for(args.store, data) as location:
        if args.jobs:
            for workers in args.job_workers:
                report_jobs(args, await jobs_run(args, location, data, workers))
            return
        report_accept(args, args.replicas, await accept_run(args, location, data, args.replicas))


async def matrix(args: argparse.Namespace) -> None:
    """SQLite ×1, PostgreSQL ×1 and ×2 (accepted/s, p99), then jobs/min with 1 and 2 workers."""
    rows: list[tuple[str, int, dict[str, Any]]] = []
    for spec, replicas in (("sqlite", 1), ("postgresql", 1), ("postgresql", 2)):
        data = Path(tempfile.mkdtemp(prefix="opsagent-bench-"))
        with store_for(spec, data) as location:
            args.store = spec
            result = await accept_run(args, location, data, replicas)
            report_accept(args, replicas, result)
            print()
            rows.append((spec, replicas, result))
    throughput = []
    data = Path(tempfile.mkdtemp(prefix="opsagent-bench-"))
    with store_for("postgresql", data) as location:
        args.store = "postgresql"
        for workers in (1, 2):
            result = await jobs_run(args, location, data, workers)
            report_jobs(args, result)
            throughput.append(result)
    print()
    print("| store | replicas | accepted/s | p50 | p99 | lost | duplicated |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for spec, replicas, result in rows:
        p50, p99_ = p99(result["latencies"])
        accepted = result["statuses"].get(202, 0)
        stored = result["stored"]
        lost = max(args.warmup + args.notifications - stored["persisted"], 0)
        print(
            f"| {spec} | {replicas} | {accepted / result['elapsed']:,.0f} | {p50 * 1000:.1f} ms | {p99_ * 1000:.1f} ms "
            f"| {lost} | {stored['duplicated']} |"
        )
    print()
    print("| store | worker processes | jobs | jobs/min |")
    print("|---|---:|---:|---:|")
    for result in throughput:
        print(
            f"| postgresql | {result['workers']} | {result['jobs']} | {result['jobs'] / result['elapsed'] * 60:.0f} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notifications", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--groups", type=int, default=200, help="distinct alert groups (the rest are duplicates)")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=2, help="client processes sharing the concurrency")
    parser.add_argument(
        "--client",
        choices=("aiohttp", "httpx"),
        default="aiohttp",
        help="the HTTP client the senders use (aiohttp costs the shared cores least; needs the bench extra)",
    )
    parser.add_argument(
        "--rate", type=float, default=None, help="notifications per second (default: as fast as answered)"
    )
    parser.add_argument("--fixtures", type=Path, default=ROOT / "fixtures" / "incidents")
    parser.add_argument(
        "--store", default="sqlite", help="sqlite, postgresql (a throwaway server) or postgresql://user@host/db"
    )
    parser.add_argument("--replicas", type=int, default=1, help="service replicas sharing the store")
    parser.add_argument(
        "--correlation",
        action="store_true",
        help="correlate alerts into storms, as the service does by default (every notification goes through "
        "the storms lock; the groups name 200 clusters, so each is still an incident of its own)",
    )
    parser.add_argument("--jobs", type=int, default=0, help="measure investigations/min over this many jobs instead")
    parser.add_argument(
        "--job-workers",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1, 2],
        help="worker processes to measure --jobs with (comma-separated)",
    )
    parser.add_argument(
        "--matrix", action="store_true", help="the table of docs/benchmarks/webhook-load.md: every store, replicas"
    )
    parsed = parser.parse_args()
    if parsed.matrix and not parsed.jobs:
        parsed.jobs = 60
    asyncio.run(main(parsed))
