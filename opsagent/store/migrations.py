"""Versioned schema migrations: one set of SQL files for both databases, applied in order.

``migrations/NNNN_name.sql`` is schema version NNNN. The files are written in the SQL both SQLite
and PostgreSQL speak; the one thing they name differently, an auto-numbered key, is written
``{auto_id}`` and filled in from the :class:`~opsagent.store.sql.Dialect`. Both databases have
transactional DDL, so each backend applies every pending file and records the version in one
transaction: a failure leaves the schema as it was.

Where the version is recorded: SQLite in ``PRAGMA user_version`` (as every earlier opsagent did, so
older files open and older binaries refuse newer files); PostgreSQL in the table
``opsagent_schema``, one row per version with when it was applied. Replicas starting together on
one PostgreSQL database take an advisory lock first: one migrates, the others then find nothing
to do.

Why SQL files and not Alembic: the store is written in SQL, not through SQLAlchemy models, so
Alembic's strengths (autogenerate from models, dialect-neutral DDL through SQLAlchemy) would bring
SQLAlchemy and a second schema language for four files; what the store needs from a migration tool
(order, a version record, atomic application, a lock against concurrent starts, a refusal of a
newer schema) is this module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

from opsagent.store.sql import Dialect

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    def statements(self, dialect: Dialect) -> list[str]:
        """The file's statements for ``dialect``, comments dropped, in order."""
        text = "\n".join(line for line in self.sql.splitlines() if not line.lstrip().startswith("--"))
        text = text.replace("{auto_id}", dialect.auto_id)
        return [s.strip() for s in text.split(";") if s.strip()]


@cache
def migrations() -> tuple[Migration, ...]:
    """Every migration shipped, by version; versions are 1, 2, 3, … with no gap."""
    found = []
    for entry in files("opsagent.store").joinpath("migrations").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(version=int(match[1]), name=match[2], sql=entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"schema migrations are not numbered 1..n: {[m.version for m in found]}")
    return tuple(found)


def latest() -> int:
    return len(migrations())


def pending(current: int, *, upto: int | None = None) -> tuple[Migration, ...]:
    """The migrations after ``current`` (up to ``upto``, for tests that build an older schema)."""
    last = latest() if upto is None else upto
    return tuple(m for m in migrations() if current < m.version <= last)


def newer_schema(version: int) -> str | None:
    """Why a store at ``version`` cannot be used by this opsagent, or None."""
    if version > latest():
        return f"written by a newer opsagent (schema {version}, this one knows {latest()})"
    return None
