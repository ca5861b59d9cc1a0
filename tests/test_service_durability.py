"""Crash durability: the service is killed with SIGKILL between accepting a notification and
finishing its investigation; started again, it resumes the job and finishes it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from opsagent.store import Store
from tests.conftest import INCIDENTS, ROOT
from tests.service_support import AUTH, TOKEN, free_port, notification, wait_for


@contextmanager
def service(data: Path, port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "OPSAGENT_DATA_DIR": str(data), "OPSAGENT_WEBHOOK_TOKEN": TOKEN, "OPSAGENT_CONFIG": ""}
    cmd = [sys.executable, "-m", "opsagent.service", "serve", "--port", str(port), "--workers", "1"]
    cmd += ["--fixtures", str(INCIDENTS), "--log-level", "info"]
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with contextlib.suppress(ProcessLookupError):  # whatever it started (worker processes) goes with it
            os.killpg(proc.pid, signal.SIGKILL)


def ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_a_job_killed_mid_investigation_is_finished_after_a_restart(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "service.log"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    database = data / "opsagent.db"
    with service(data, port, log) as first:
        wait_for(lambda: ready(base), timeout_s=30)
        accepted = httpx.post(f"{base}/webhook/alertmanager", json=notification(), headers=AUTH, timeout=5)
        assert accepted.status_code == 202
        incident_id = accepted.json()["incident_id"]

        def running() -> bool:
            with Store(database) as store:
                return store.job_counts()["running"] == 1

        wait_for(running, timeout_s=20, every_s=0.02)
        first.send_signal(signal.SIGKILL)  # the service only: its worker must notice and stop too
        first.wait(timeout=10)

    with Store(database) as store:
        assert store.job_counts()["running"] == 1 and not store.has_report(incident_id)
        assert store.notification_count() == 1  # accepted means on disk

    with service(data, port, log):
        wait_for(lambda: ready(base), timeout_s=30)

        def finished() -> dict[str, object] | None:
            body = httpx.get(f"{base}/incidents/{incident_id}", headers=AUTH, timeout=5).json()
            return body if body["incident"]["investigation"] in ("done", "failed") else None

        body = wait_for(finished, timeout_s=60)
    incident = body["incident"]
    assert isinstance(incident, dict) and incident["investigation"] == "done", log.read_text()[-3000:]
    assert incident["outcome"] == "confirmed" and incident["root_kind"] == "config_change"
    assert body["report"] is not None
    with Store(database) as store:
        assert store.job_counts() == {"queued": 0, "running": 0, "done": 1, "failed": 0}
    assert '"event": "queue.resumed"' in log.read_text()
