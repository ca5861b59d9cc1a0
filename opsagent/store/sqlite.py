"""The embedded backend: one SQLite file under the data directory, one connection per caller.

WAL mode and a busy timeout let the CLI and the service use the file at once; a write transaction
(``BEGIN IMMEDIATE``) holds the file, so the operations' row locks are not needed here. A corrupt
or locked file is a :class:`StoreError` naming the file and what to do; the store never rewrites a
file it cannot read, so nothing is lost. Migrations: :mod:`opsagent.store.migrations`, the version
in ``PRAGMA user_version``.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from pydantic import ValidationError

from opsagent.store.errors import StoreError, Unreadable
from opsagent.store.migrations import newer_schema, pending
from opsagent.store.sql import SQLITE, Rows, Tx, run_now

P = ParamSpec("P")
T = TypeVar("T")
Operation = Callable[Concatenate[Tx, P], Coroutine[Any, Any, T]]

#: RETURNING (the operations read the keys they insert with it) came with SQLite 3.35 (2021).
MIN_SQLITE = (3, 35, 0)


class SqliteTx:
    dialect = SQLITE

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    async def execute(self, sql: str, args: Sequence[object] = ()) -> Rows:
        cursor = self._db.execute(sql, args)
        return Rows(rows=cursor.fetchall(), rowcount=cursor.rowcount)

    async def executemany(self, sql: str, args: Sequence[Sequence[object]]) -> None:
        if args:
            self._db.executemany(sql, args)

    async def insert_many(self, sql: str, args: Sequence[Sequence[object]]) -> list[int]:
        return [int(self._db.execute(sql, row).fetchone()[0]) for row in args]

    async def lock(self, keys: Sequence[int]) -> None:
        return None  # BEGIN IMMEDIATE already excludes every other writer


class SqliteDatabase:
    """One connection to the store's file; opening it migrates the schema."""

    def __init__(self, path: Path, *, timeout_s: float = 5.0, upto: int | None = None) -> None:
        self.path = path
        self.where = str(path)
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise StoreError(
                f"SQLite {sqlite3.sqlite_version} is too old (the store needs 3.35 or newer)", where=self.where
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=timeout_s, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the store: {exc}", where=self.where) from exc
        self._tx = SqliteTx(self._db)
        with self._guard():
            self._db.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            self._wal(timeout_s)
            self._migrate(upto)

    def _wal(self, timeout_s: float) -> None:
        """WAL mode, set once per file. Setting it takes the file for a moment and does not wait for
        the busy timeout: two processes opening a new file at once try again, briefly."""
        deadline = time.monotonic() + timeout_s
        while self._db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            try:
                self._db.execute("PRAGMA journal_mode = WAL")
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise StoreError(
                    "the store is locked by another opsagent process; try again in a moment", where=self.where
                ) from exc
            raise StoreError(f"store error: {exc}", where=self.where) from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"not a readable opsagent store ({exc}); nothing was changed. Move the file aside "
                "(lessons can be re-imported from an export) or point OPSAGENT_DATA_DIR elsewhere",
                where=self.where,
            ) from exc
        except Unreadable as exc:
            raise StoreError(f"{exc}; nothing was changed", where=self.where) from exc
        except ValidationError as exc:
            raise StoreError(
                f"a stored row cannot be read ({str(exc).splitlines()[0]}); nothing was changed", where=self.where
            ) from exc

    @contextmanager
    def _transaction(self, *, commit: bool = True) -> Iterator[None]:
        with self._guard():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                if self._db.in_transaction:  # an I/O error may have rolled it back already
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT" if commit else "ROLLBACK")

    def write(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Runs an operation in a write transaction."""
        with self._transaction():
            return run_now(operation(self._tx, *args, **kwargs))

    def read(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Runs an operation that only reads; WAL readers never wait for the writer."""
        with self._guard():
            return run_now(operation(self._tx, *args, **kwargs))

    def probe(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Runs an operation in a write transaction that is rolled back: could it be done now?"""
        with self._transaction(commit=False):
            return run_now(operation(self._tx, *args, **kwargs))

    def _migrate(self, upto: int | None) -> None:
        version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        refusal = newer_schema(version)
        if refusal is not None:
            raise StoreError(refusal, where=self.where)
        if not pending(version, upto=upto):
            return  # the usual case: no write lock taken
        with self._transaction():  # read again under the write lock: another process may have migrated
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            todo = pending(version, upto=upto)
            for migration in todo:
                for statement in migration.statements(SQLITE):
                    self._db.execute(statement)
            if todo:
                self._db.execute(f"PRAGMA user_version = {todo[-1].version}")

    def version(self) -> int:
        with self._guard():
            return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def defer_checkpoints(self) -> None:
        """This connection's commits stop copying the WAL into the database file: whoever calls
        :meth:`checkpoint` does it instead, off the path that answers webhooks."""
        with self._guard():
            self._db.execute("PRAGMA wal_autocheckpoint = 0")

    def checkpoint(self) -> None:
        with self._guard():
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")
