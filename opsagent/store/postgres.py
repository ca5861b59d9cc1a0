"""The shared backend: a PostgreSQL server that several service replicas and worker hosts use at once.

psycopg 3 (imported only when a ``postgresql://`` store is used: the ``postgresql`` extra). The
service holds an :class:`PostgresPool` (``psycopg_pool.AsyncConnectionPool``) and awaits its
operations on the event loop; the CLI and worker processes use a :class:`PostgresDatabase`, one
blocking connection, on which the same operations run without an event loop
(:func:`~opsagent.store.sql.run_now`). Connections run in autocommit and every operation in an
explicit transaction (``READ COMMITTED``): the operations' row locks, ``SKIP LOCKED`` and advisory
locks keep concurrent replicas apart. A deadlock or serialization failure (possible when two
transactions meet in an order the operations did not foresee) is retried a few times, the whole
operation again.

Every psycopg and pool error becomes a :class:`StoreError` naming the server and database (never
the password) at this boundary (:func:`mapped_errors` says which; a test checks they cover every
exception class psycopg and its pool define). Queued jobs are announced on a channel (LISTEN/NOTIFY),
so a worker on another host starts one at once rather than at its next poll.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import structlog
from pydantic import ValidationError

from opsagent.redaction import scrub
from opsagent.store.errors import StoreError, Unreadable
from opsagent.store.location import StoreLocation
from opsagent.store.migrations import newer_schema, pending
from opsagent.store.sql import JOBS_CHANNEL, POSTGRESQL, Rows, Tx, run_now

log = structlog.get_logger("opsagent.store")

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

P = ParamSpec("P")
T = TypeVar("T")
Operation = Callable[Concatenate[Tx, P], Coroutine[Any, Any, T]]

#: Tries of an operation that met a deadlock or a serialization failure.
ATTEMPTS = 3
#: The advisory lock replicas take to migrate one at a time (any constant: "opsagent" in ASCII).
MIGRATION_LOCK = int.from_bytes(b"opsagent", "big")
LOCK_SQL = "SELECT pg_advisory_xact_lock(k) FROM unnest(%s::bigint[]) AS k"


def _modules() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:  # pragma: no cover - the extra is part of the dev install
        raise StoreError(
            "store_url is PostgreSQL, but psycopg is not installed: pip install 'opsagent-rca[postgresql]'",
            where="postgresql",
        ) from exc
    return psycopg, psycopg_pool


@lru_cache(maxsize=512)
def _pg(sql: str) -> str:
    """The operations' ``?`` placeholders as psycopg's ``%s`` (a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


def _kwargs(location: StoreLocation) -> dict[str, Any]:
    out: dict[str, Any] = {"autocommit": True, "connect_timeout": max(1, round(location.connect_timeout_s))}
    out["application_name"] = "opsagent"
    if location.password is not None:
        out["password"] = location.password.get_secret_value()
    return out


def _mapped(location: StoreLocation, exc: BaseException) -> StoreError:
    psycopg, psycopg_pool = _modules()
    where = str(location)
    text = scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return StoreError(f"no connection to the store within its timeout ({text})", where=where)
    if isinstance(exc, psycopg.OperationalError):
        return StoreError(f"cannot reach the store ({text}); check store_url and {where}'s server", where=where)
    if isinstance(exc, Unreadable):
        return StoreError(f"{exc}; nothing was changed", where=where)
    if isinstance(exc, ValidationError):
        return StoreError(f"a stored row cannot be read ({text}); nothing was changed", where=where)
    return StoreError(f"store error: {text}", where=where)


def mapped_errors() -> tuple[type[BaseException], ...]:
    """What :func:`_mapped` turns into a StoreError: every psycopg and pool error, and rows that do
    not read."""
    psycopg, psycopg_pool = _modules()
    return (psycopg.Error, psycopg_pool.PoolTimeout, psycopg_pool.TooManyRequests, Unreadable, ValidationError)


def _retryable(exc: BaseException) -> bool:
    psycopg, _ = _modules()
    return isinstance(exc, psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure)


class PostgresTx:
    """A transaction on psycopg's blocking connection (never suspends)."""

    dialect = POSTGRESQL

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    async def execute(self, sql: str, args: Sequence[object] = ()) -> Rows:
        cursor = self._conn.execute(_pg(sql), args)
        return Rows(rows=cursor.fetchall() if cursor.description else [], rowcount=cursor.rowcount)

    async def executemany(self, sql: str, args: Sequence[Sequence[object]]) -> None:
        if args:
            with self._conn.cursor() as cursor:
                cursor.executemany(_pg(sql), args)

    async def insert_many(self, sql: str, args: Sequence[Sequence[object]]) -> list[int]:
        ids: list[int] = []
        if args:
            with self._conn.cursor() as cursor:
                cursor.executemany(_pg(sql), args, returning=True)
                while True:
                    row = cursor.fetchone()
                    ids.append(int(row[0]) if row else 0)
                    if not cursor.nextset():
                        break
        return ids

    async def lock(self, keys: Sequence[int]) -> None:
        if keys:
            self._conn.execute(LOCK_SQL, (list(keys),))


class AsyncPostgresTx:
    """A transaction on psycopg's ``AsyncConnection``."""

    dialect = POSTGRESQL

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn

    async def execute(self, sql: str, args: Sequence[object] = ()) -> Rows:
        cursor = await self._conn.execute(_pg(sql), args)
        return Rows(rows=await cursor.fetchall() if cursor.description else [], rowcount=cursor.rowcount)

    async def executemany(self, sql: str, args: Sequence[Sequence[object]]) -> None:
        if args:
            async with self._conn.cursor() as cursor:
                await cursor.executemany(_pg(sql), args)

    async def insert_many(self, sql: str, args: Sequence[Sequence[object]]) -> list[int]:
        ids: list[int] = []
        if args:
            async with self._conn.cursor() as cursor:
                await cursor.executemany(_pg(sql), args, returning=True)
                while True:
                    row = await cursor.fetchone()
                    ids.append(int(row[0]) if row else 0)
                    if not cursor.nextset():
                        break
        return ids

    async def lock(self, keys: Sequence[int]) -> None:
        if keys:
            await self._conn.execute(LOCK_SQL, (list(keys),))


_SCHEMA_TABLE = (
    "CREATE TABLE IF NOT EXISTS opsagent_schema (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
    " applied_at TEXT NOT NULL DEFAULT (now()::text))"
)


async def migrate(tx: Tx, *, upto: int | None = None) -> int:
    """Applies the pending migrations in this transaction, under the migration lock; returns the
    schema version."""
    await tx.lock([MIGRATION_LOCK])
    await tx.execute(_SCHEMA_TABLE)
    row = (await tx.execute("SELECT COALESCE(MAX(version), 0) FROM opsagent_schema")).one()
    version = int(row[0]) if row else 0
    refusal = newer_schema(version)
    if refusal is not None:
        raise _Refused(refusal)
    for migration in pending(version, upto=upto):
        for statement in migration.statements(POSTGRESQL):
            await tx.execute(statement)
        await tx.execute(
            "INSERT INTO opsagent_schema (version, name) VALUES (?, ?)", (migration.version, migration.name)
        )
        version = migration.version
    return version


class _Refused(Exception):
    """The schema is newer than this opsagent: said as it is, not as a database error."""


class PostgresDatabase:
    """One blocking connection (the CLI, a worker process's lessons); opening it migrates the schema."""

    def __init__(self, location: StoreLocation, *, upto: int | None = None) -> None:
        psycopg, _ = _modules()
        self.location = location
        self.where = str(location)
        try:
            self._conn = psycopg.connect(location.conninfo, **_kwargs(location))
        except psycopg.Error as exc:
            raise _mapped(location, exc) from exc
        self._tx = PostgresTx(self._conn)
        try:
            self.write(migrate, upto=upto)
        except BaseException:
            self._conn.close()
            raise

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except _Refused as exc:
            raise StoreError(str(exc), where=self.where) from exc
        except mapped_errors() as exc:
            raise _mapped(self.location, exc) from exc

    def write(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        with self._guard():
            for attempt in range(1, ATTEMPTS + 1):
                try:
                    with self._conn.transaction():
                        return run_now(operation(self._tx, *args, **kwargs))
                except Exception as exc:
                    if attempt == ATTEMPTS or not _retryable(exc):
                        raise
        raise AssertionError("unreachable")

    def read(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        with self._guard():
            return run_now(operation(self._tx, *args, **kwargs))

    def probe(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        with self._guard(), self._conn.transaction(force_rollback=True):
            return run_now(operation(self._tx, *args, **kwargs))

    def version(self) -> int:
        return self.read(_version)


async def _version(tx: Tx) -> int:
    row = (await tx.execute("SELECT COALESCE(MAX(version), 0) FROM opsagent_schema")).one()
    return int(row[0]) if row else 0


class PostgresPool:
    """The service's connections: a ``psycopg_pool.AsyncConnectionPool`` of ``location.pool_size``."""

    concurrent_writes = 2

    def __init__(self, location: StoreLocation) -> None:
        _, pool = _modules()
        self.location = location
        self.where = str(location)
        self._pool: psycopg_pool.AsyncConnectionPool[Any] = pool.AsyncConnectionPool(
            location.conninfo,
            kwargs=_kwargs(location),
            # the accept path, the dispatcher and the pages each hold one at once: opened at start, not
            # under the first load (a connection costs a fork on the server and a SCRAM exchange)
            min_size=min(4, location.pool_size),
            max_size=location.pool_size,
            open=False,
            timeout=location.connect_timeout_s,
            name="opsagent-store",
        )

    async def open(self) -> None:
        """Connects and migrates, on one connection first: a server that cannot be reached, or that
        refuses the password, is a StoreError saying why, now rather than at the first webhook."""
        psycopg, _ = _modules()
        async with self._guard():
            first = await psycopg.AsyncConnection.connect(self.location.conninfo, **_kwargs(self.location))
            async with first as conn, conn.transaction():
                await migrate(AsyncPostgresTx(conn))
            try:
                await self._pool.open(wait=True, timeout=self.location.connect_timeout_s)
            except BaseException:
                await self._pool.close()
                raise

    async def close(self) -> None:
        await self._pool.close()

    async def listen(self, wake: Callable[[], None], *, retry_s: float = 5.0) -> None:
        """Calls ``wake`` whenever jobs are queued (by any replica), until cancelled: LISTEN on a
        connection of its own, outside the pool, opened again after a failure. Polling stays the
        fallback; this only makes a new job start at once on a worker elsewhere."""
        psycopg, _ = _modules()
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self.location.conninfo, **_kwargs(self.location))
                async with conn:
                    await conn.execute(f"LISTEN {JOBS_CHANNEL}")
                    wake()  # jobs may have been queued while it was not listening
                    async for _ in conn.notifies():
                        wake()
            except psycopg.Error as exc:
                log.warning("store.listen_failed", error=scrub(str(exc).strip().splitlines()[0] if str(exc) else ""))
            await asyncio.sleep(retry_s)

    @asynccontextmanager
    async def _guard(self) -> AsyncIterator[None]:
        try:
            yield
        except _Refused as exc:
            raise StoreError(str(exc), where=self.where) from exc
        except mapped_errors() as exc:
            raise _mapped(self.location, exc) from exc

    async def write(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        async with self._guard():
            for attempt in range(1, ATTEMPTS + 1):
                try:
                    async with self._pool.connection() as conn, conn.transaction():
                        return await operation(AsyncPostgresTx(conn), *args, **kwargs)
                except Exception as exc:
                    if attempt == ATTEMPTS or not _retryable(exc):
                        raise
                    await asyncio.sleep(0.01 * attempt)
        raise AssertionError("unreachable")

    async def read(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        async with self._guard(), self._pool.connection() as conn:
            return await operation(AsyncPostgresTx(conn), *args, **kwargs)

    async def probe(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        async with self._guard(), self._pool.connection() as conn, conn.transaction(force_rollback=True):
            return await operation(AsyncPostgresTx(conn), *args, **kwargs)
