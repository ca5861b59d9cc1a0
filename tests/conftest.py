"""Shared test setup: a guard that makes any non-loopback network call fail loudly."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from opsagent.store import StoreLocation
from tests import postgres_server as postgres_server_module

ROOT = Path(__file__).resolve().parent.parent
#: A test that replays a whole corpus or a real data set takes minutes on a quiet machine and many
#: more on a busy one (beside two CPU hogs, a module's shared replay passed the suite's 300 s). What
#: such a test checks does not depend on how long that takes, so it is held to this guard against a
#: hang (``pytest.mark.timeout(HANG_GUARD_S)``) instead of to speed.
HANG_GUARD_S = 3 * 3600
INCIDENTS = ROOT / "fixtures" / "incidents"
ORDER_INCIDENT = INCIDENTS / "order-service-threadpool-config"

_real_connect = socket.socket.connect


def _loopback_only(self: socket.socket, address: object) -> object:
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, str) and (host.startswith("127.") or host in ("localhost", "::1") or host.startswith("/")):
        return _real_connect(self, address)  # type: ignore[arg-type]
    raise RuntimeError(f"test tried to reach the network: {address!r}")


@pytest.fixture(autouse=True)
def private_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own store: nothing reads or writes the user's data directory."""
    data = tmp_path / "opsagent-data"
    monkeypatch.setenv("OPSAGENT_DATA_DIR", str(data))
    monkeypatch.delenv("OPSAGENT_CONFIG", raising=False)
    for name in ("OPSAGENT_STORE_URL", "OPSAGENT_STORE_PASSWORD"):  # the store is the test's, never the user's
        monkeypatch.delenv(name, raising=False)
    return data


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(socket.socket, "connect", _loopback_only)
    yield


# ---------------------------------------------------------------- the store's two backends

#: Every test that takes ``store_location`` runs once per backend.
BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[postgres_server_module.PostgresServer]:
    """One PostgreSQL server for the session (each test gets a database of its own); the tests that
    need it skip, saying why, only when it cannot be started here."""
    reason = postgres_server_module.unavailable()
    if reason is not None:
        pytest.skip(f"no PostgreSQL server: {reason}")
    running = postgres_server_module.postgres()
    try:
        server = running.__enter__()
    except RuntimeError as exc:
        pytest.skip(f"no PostgreSQL server: {exc}")
    try:
        yield server
    finally:
        running.__exit__(None, None, None)


@pytest.fixture(params=BACKENDS)
def store_location(
    request: pytest.FixtureRequest, private_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> StoreLocation:
    """The store a test uses: the SQLite file under its data directory, or a fresh schema of the
    session's PostgreSQL server's database. The environment says the same (``OPSAGENT_STORE_URL``, and the
    password in ``OPSAGENT_STORE_PASSWORD``), so a CLI command or a service the test starts uses it."""
    if request.param == "sqlite":
        location = StoreLocation.sqlite(private_data_dir / "opsagent.db")
        monkeypatch.setenv("OPSAGENT_STORE_URL", location.url)
        return location
    server: postgres_server_module.PostgresServer = request.getfixturevalue("postgres_server")
    url = server.create_schema(f"t_{uuid.uuid4().hex[:16]}")
    monkeypatch.setenv("OPSAGENT_STORE_URL", url)
    monkeypatch.setenv("OPSAGENT_STORE_PASSWORD", postgres_server_module.PASSWORD)
    return StoreLocation(url=url, password=SecretStr(postgres_server_module.PASSWORD))
