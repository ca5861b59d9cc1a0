"""The store's one error: what went wrong and where (a SQLite file, or a PostgreSQL server named
without its password)."""

from __future__ import annotations

from opsagent.errors import UserError


class StoreError(UserError):
    def __init__(self, message: str, *, where: str) -> None:
        self.where = where
        super().__init__(f"{where}: {message}")


class Unreadable(ValueError):
    """A stored row that no longer reads as what it holds (a lesson or report that does not validate):
    raised by an operation, turned into a :class:`StoreError` naming the store by its backend."""
