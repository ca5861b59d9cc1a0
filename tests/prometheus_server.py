"""A real Prometheus for tests: Debian's ``prometheus`` on a free loopback port, loaded with a
recorded incident's metrics through ``promtool tsdb create-blocks-from openmetrics``."""

from __future__ import annotations

import math
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from opsagent.fixtures import Recording

#: bcrypt of "correct-horse" (Prometheus' web config stores only the hash).
BASIC_USER, BASIC_PASSWORD = "opsagent", "correct-horse"
_BASIC_HASH = "$2b$04$/.Gd2/n1XPjK2BvIzJ4jveB5G8kGrCMfsq9Vcj8GTAndaQ8/CpkXa"


def available() -> bool:
    return shutil.which("prometheus") is not None and shutil.which("promtool") is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _label_value(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def openmetrics(recording: Recording) -> str:
    """The recording's series as OpenMetrics text: one family after another, no TYPE lines
    (types would rename counters), timestamps in seconds."""
    by_name: dict[str, list[str]] = {}
    for series in recording.metrics:
        labels = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(series.labels.items()) if k != "__name__")
        lines = by_name.setdefault(series.name, [])
        for t, v in sorted(series.samples):
            if math.isfinite(v):
                lines.append(f"{series.name}{{{labels}}} {v!r} {float(t)!r}")
    return "\n".join(line for name in sorted(by_name) for line in by_name[name]) + "\n# EOF\n"


@dataclass
class PrometheusServer:
    url: str
    process: subprocess.Popen[bytes]


@contextmanager
def prometheus(recording: Recording, workdir: Path, *, basic_auth: bool = False) -> Iterator[PrometheusServer]:
    data = workdir / "data"
    data.mkdir(parents=True)
    source = workdir / "metrics.om"
    source.write_text(openmetrics(recording), encoding="utf-8")
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1m\nscrape_configs: []\n", encoding="utf-8")
    port = free_port()
    args = [
        "prometheus",
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        "--storage.tsdb.retention.time=100y",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    if basic_auth:
        web = workdir / "web.yml"
        web.write_text(f"basic_auth_users:\n  {BASIC_USER}: {_BASIC_HASH}\n", encoding="utf-8")
        args.append(f"--web.config.file={web}")
    log = (workdir / "prometheus.log").open("wb")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, process, basic_auth=basic_auth)
        yield PrometheusServer(url=url, process=process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _wait_ready(url: str, process: subprocess.Popen[bytes], *, basic_auth: bool) -> None:
    auth = (BASIC_USER, BASIC_PASSWORD) if basic_auth else None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"prometheus exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/-/ready", auth=auth, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("prometheus did not become ready within 30 s")
