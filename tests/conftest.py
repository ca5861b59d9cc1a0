"""Shared test setup: a guard that makes any non-loopback network call fail loudly."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
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
    return data


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(socket.socket, "connect", _loopback_only)
    yield
