"""A real Alertmanager (Debian's ``prometheus-alertmanager``) for tests: free loopback ports, no
clustering, temporary storage, one receiver posting to the service under test with bearer auth."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.service_support import free_port

BINARY = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")

requires_alertmanager = pytest.mark.skipif(
    BINARY is None, reason="prometheus-alertmanager is not installed (make system-deps installs it)"
)


class Alertmanager:
    def __init__(
        self,
        directory: Path,
        *,
        webhook_url: str,
        token: str,
        group_wait: str = "1s",
        group_interval: str = "2s",
        group_by: tuple[str, ...] = ("alertname", "service"),
    ) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = {
            "route": {
                "receiver": "opsagent",
                "group_by": list(group_by),
                "group_wait": group_wait,
                "group_interval": group_interval,
                "repeat_interval": "1h",
            },
            "receivers": [
                {
                    "name": "opsagent",
                    "webhook_configs": [
                        {
                            "url": webhook_url,
                            "send_resolved": True,
                            "http_config": {"authorization": {"type": "Bearer", "credentials": token}},
                        }
                    ],
                }
            ],
        }
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Alertmanager:
        assert BINARY is not None
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "alertmanager.yml"
        config.write_text(yaml.safe_dump(self.config))
        log = (self.directory / "alertmanager.log").open("wb")
        self.process = subprocess.Popen(
            [
                BINARY,
                f"--config.file={config}",
                f"--storage.path={self.directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"alertmanager exited: {(self.directory / 'alertmanager.log').read_text()}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError("alertmanager did not become ready")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def post_alerts(self, alerts: list[dict[str, Any]]) -> None:
        """POST to Alertmanager's own API, as Prometheus does."""
        response = httpx.post(f"{self.url}/api/v2/alerts", json=alerts, timeout=5)
        response.raise_for_status()
