"""A real PostgreSQL for tests and benchmarks: Debian's ``postgresql`` server, a throwaway cluster
made by ``initdb`` in a temporary directory and started by ``pg_ctl`` on a free loopback port.

PostgreSQL refuses to run as root (and the machines here run as root): the cluster is made and
run by an unprivileged user, ``postgres`` (which the Debian package creates) or ``nobody``,
through ``runuser``. The role opsagent connects as has a password (``scram-sha-256`` over TCP), so
the store's "password from the environment" path is the one tested; the ``postgres`` superuser can
connect without one, over the cluster's own Unix socket only.

:func:`unavailable` says why a server cannot be had here (no binaries, no unprivileged user), for a
test to skip with that reason; a server whose binaries are here but which fails to start is an error
with its log, not a skip.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

ROLE, PASSWORD, DATABASE = "opsagent", "pg-test-password", "opsagent"


def _bin(name: str) -> str | None:
    """Debian keeps the server's programs out of PATH, under /usr/lib/postgresql/<major>/bin."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return found[-1] if found else shutil.which(name)


def _runas() -> str | None:
    if os.geteuid() != 0:
        return None  # already unprivileged: run the server as ourselves
    for user in ("postgres", "nobody"):
        try:
            pwd.getpwnam(user)
            return user
        except KeyError:
            continue
    return ""


def unavailable() -> str | None:
    """Why no PostgreSQL server can be started here, or None when one can."""
    if _bin("initdb") is None or _bin("pg_ctl") is None:
        return "PostgreSQL is not installed (make test installs Debian's postgresql package)"
    if _runas() == "":
        return "running as root with no unprivileged user (postgres or nobody) to run PostgreSQL as"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser to start PostgreSQL as an unprivileged user"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class PostgresServer:
    port: int
    directory: Path

    @property
    def url(self) -> str:
        """The store URL opsagent is given: no password in it (that comes from the environment)."""
        return f"postgresql://{ROLE}@127.0.0.1:{self.port}/{DATABASE}"

    def database_url(self, name: str) -> str:
        return f"postgresql://{ROLE}@127.0.0.1:{self.port}/{name}"

    @property
    def socket_dir(self) -> Path:
        return self.directory / "run"

    def psql(self, sql: str, *, database: str = DATABASE) -> str:
        """Runs SQL as the superuser over the cluster's Unix socket; returns what psql printed."""
        done = self._as_owner(
            [
                _bin("psql") or "psql",
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-At",
                "-h",
                str(self.socket_dir),
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                database,
                "-c",
                sql,
            ],
        )
        return done.stdout.strip()

    def create_database(self, name: str) -> str:
        """A fresh empty database owned by the test role; returns its store URL. Over the cluster's
        socket as the superuser (local connections are trusted), without a process per call."""
        import psycopg

        with psycopg.connect(host=str(self.socket_dir), port=self.port, user="postgres", dbname="postgres") as conn:
            conn.autocommit = True
            conn.execute(f'CREATE DATABASE "{name}" OWNER {ROLE}')
        return self.database_url(name)

    def create_schema(self, name: str) -> str:
        """A fresh empty schema of the test role's database; returns a store URL whose connections
        use it (``options=-csearch_path=…``, as a team may give opsagent a schema of its own). Far
        cheaper than a database per test: nothing is copied."""
        import psycopg

        with psycopg.connect(host=str(self.socket_dir), port=self.port, user="postgres", dbname=DATABASE) as conn:
            conn.autocommit = True
            conn.execute(f'CREATE SCHEMA "{name}" AUTHORIZATION {ROLE}')
        return f"{self.url}?options=-csearch_path%3D{name}"

    def _as_owner(self, cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        user = _runas()
        full = ["runuser", "-u", user, "--", *cmd] if user else cmd
        return subprocess.run(full, check=True, capture_output=True, text=True, timeout=timeout)


def _chown(path: Path, user: str | None) -> None:
    if user:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)


@contextmanager
def postgres(*, durable: bool = False) -> Iterator[PostgresServer]:
    """A running server with a role and database for opsagent; stopped and removed afterwards.
    ``durable=False`` (tests) turns fsync off: nothing here survives the machine anyway; benchmarks
    pass ``durable=True`` so commits cost what they cost in production."""
    reason = unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    user = _runas()
    # not under pytest's tmp_path: its parents are private to root, and the server runs as another user
    directory = Path(tempfile.mkdtemp(prefix="opsagent-pg-"))
    os.chmod(directory, 0o755)
    _chown(directory, user)
    data, run = directory / "data", directory / "run"
    run.mkdir()
    _chown(run, user)
    port = free_port()
    server = PostgresServer(port=port, directory=directory)
    log = directory / "server.log"
    log.touch()
    _chown(log, user)
    options = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={run} -c max_connections=200"
    if not durable:
        options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    try:
        server._as_owner(
            [
                _bin("initdb") or "initdb",
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ],
            timeout=120,
        )
        server._as_owner(
            [_bin("pg_ctl") or "pg_ctl", "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60", "start"],
            timeout=90,
        )
        server.psql(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'", database="postgres")
        server.psql(f'CREATE DATABASE "{DATABASE}" OWNER {ROLE}', database="postgres")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        said = exc.stderr if isinstance(exc.stderr, str) else ""
        _stop(server, data)
        raise RuntimeError(f"PostgreSQL did not start: {said}\n{log.read_text()[-3000:]}") from exc
    try:
        yield server
    finally:
        _stop(server, data)


def _stop(server: PostgresServer, data: Path) -> None:
    if (data / "postmaster.pid").exists():
        with suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            server._as_owner([_bin("pg_ctl") or "pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop"])
    for _ in range(50):  # the postmaster is gone before its files may be removed
        if not (data / "postmaster.pid").exists():
            break
        time.sleep(0.1)
    shutil.rmtree(server.directory, ignore_errors=True)
