"""Helpers for the webhook service's tests: payloads, settings, a real server on a loopback port."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import uvicorn
import yaml
from fastapi import FastAPI

from opsagent.settings import Settings
from tests.conftest import INCIDENTS, ORDER_INCIDENT

TOKEN = "s3cret-token-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def order_alert(**labels: str) -> dict[str, Any]:
    """The order-service incident's alert, firing, as Alertmanager sends it."""
    alert = yaml.safe_load((ORDER_INCIDENT / "incident.yaml").read_text())["alert"]
    alert["labels"].update(labels)
    alert["status"] = "firing"
    return alert


def notification(
    alerts: list[dict[str, Any]] | None = None,
    *,
    group_key: str = '{}:{alertname="OrderServiceHighLatency"}',
    status: str = "firing",
    **extra: Any,
) -> dict[str, Any]:
    alerts = alerts if alerts is not None else [order_alert()]
    if status == "resolved":
        alerts = [{**a, "status": "resolved", "endsAt": datetime.now(UTC).isoformat()} for a in alerts]
    body = {
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "opsagent",
        "groupLabels": {"alertname": alerts[0]["labels"].get("alertname", "")},
        "commonLabels": alerts[0]["labels"],
        "commonAnnotations": alerts[0].get("annotations", {}),
        "externalURL": "http://alertmanager.test:9093",
        "alerts": alerts,
    }
    body.update(extra)
    return body


def settings(tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": tmp_path / "data",
        "webhook_token": TOKEN,
        "fixtures_dir": INCIDENTS,
        "workers": 1,
    }
    values.update(overrides)
    return Settings(**values)


def wait_for(probe: Callable[[], T | None], *, timeout_s: float = 30.0, every_s: float = 0.1) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting after {timeout_s} s")
        time.sleep(every_s)


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """The app on uvicorn in a thread, on a free loopback port; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True, name="uvicorn")
    thread.start()
    wait_for(lambda: server.started, timeout_s=20, every_s=0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


class DyingProvider:
    """A provider whose worker process dies as it opens its sources (a segfault, an OOM kill)."""

    name = "dying"

    def reading(self, alert: object) -> None:
        os._exit(3)
