"""Where the store is: a SQLite file (the embedded default) or a PostgreSQL server, from one
setting, ``store_url``. The URL never holds a secret: the password comes from the environment
(``OPSAGENT_STORE_PASSWORD``), or from libpq's own ``PGPASSWORD``/``PGPASSFILE`` (a Kubernetes
Secret mounted as a file), and no URL this module prints can carry one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr

#: The only place the store's password is read from (besides libpq's own variables).
STORE_PASSWORD_ENV = "OPSAGENT_STORE_PASSWORD"
SCHEMES = ("sqlite", "postgresql", "postgres")


def url_problem(url: str) -> str | None:
    """What is wrong with a ``store_url`` (a password in it, an unknown scheme), or None."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        return f"store_url must start with sqlite:/// or postgresql:// (not {parts.scheme or url!r}:)"
    if parts.scheme == "sqlite":
        if parts.netloc or not parts.path:
            return "a SQLite store_url is sqlite:///absolute/path/to/opsagent.db"
        return None
    if parts.password is not None or any(k.lower() == "password" for k, _ in parse_qsl(parts.query)):
        return f"store_url holds a password: remove it and set {STORE_PASSWORD_ENV} (or PGPASSFILE)"
    return None


class StoreLocation(BaseModel):
    """A store's address and the secret to reach it; picklable, for worker processes."""

    model_config = ConfigDict(frozen=True)

    url: str
    password: SecretStr | None = None
    pool_size: int = Field(default=10, ge=1)
    connect_timeout_s: float = 10.0

    @classmethod
    def sqlite(cls, path: Path) -> StoreLocation:
        return cls(url=f"sqlite://{quote(str(path.resolve()))}")

    @classmethod
    def of(cls, where: StoreLocation | Path | str) -> StoreLocation:
        if isinstance(where, StoreLocation):
            return where
        if isinstance(where, Path):
            return cls.sqlite(where)
        problem = url_problem(where)
        if problem is not None:
            raise ValueError(problem)
        return cls(url=where)

    @property
    def kind(self) -> Literal["sqlite", "postgresql"]:
        return "sqlite" if self.url.startswith("sqlite:") else "postgresql"

    @property
    def path(self) -> Path:
        """The SQLite file (``sqlite:///abs/path``)."""
        return Path(unquote(urlsplit(self.url).path))

    @property
    def conninfo(self) -> str:
        """What libpq is given (``postgres://`` spelt as it expects)."""
        return "postgresql" + self.url[self.url.index(":") :] if self.url.startswith("postgres:") else self.url

    def __str__(self) -> str:
        """How the store is named in messages and logs: the file, or the server and database."""
        if self.kind == "sqlite":
            return str(self.path)
        parts = urlsplit(self.url)
        return f"postgresql://{parts.netloc}{parts.path}"
