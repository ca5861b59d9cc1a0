"""Hostile upstreams, tried through the real CLI: a Kubernetes API whose every list answer carries a
``continue`` token, and upstreams that answer 200 MB.

    python benchmarks/hostile_upstreams.py endless [--runs 20]
    python benchmarks/hostile_upstreams.py huge [--mb 200]

``endless`` serves the recorded cart-memory-limit-oomkill cluster on a loopback port, as the tests'
fake API server does (``tests/fake_kubernetes.py``), except that every list answer says
``continue`` (the first page holds every object, the rest are empty), and runs ``opsagent
investigate --service frontend --symptom errors --json`` against it ``--runs`` times, a fresh
process each. Per run: the exit code, whether a JSON report was printed, whether ``CancelledError``
appears in its output, the requests the API server answered, and what the report names unreadable.
Issue 23 saw 2 crashes in 20 runs (exit 1, no report) and 469 list requests in one investigation.

``huge`` serves ``--mb`` MB of JSON to every GET, streamed without a ``Content-Length``, and runs
``opsagent doctor`` against it as a Loki source and as a Kubernetes API (a kubeconfig pointing at
it): the exit code, the problem doctor names, and the process's peak resident memory. Issue 23 saw
1.25 GB for a 200 MB answer.

Nothing here reaches beyond the loopback interface.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opsagent.fixtures import load  # noqa: E402
from opsagent.sizecap import MAX_ANSWER_BYTES  # noqa: E402
from tests.fake_kubernetes import EndlessCluster  # noqa: E402
from tests.upstreams import serving  # noqa: E402

CLI = [str(Path(sys.executable).with_name("opsagent"))]  # the console script beside this Python
RECORDING = ROOT / "fixtures" / "incidents" / "cart-memory-limit-oomkill"


def kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": url}}],
                "users": [{"name": "u", "user": {"token": "loopback-only"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "prod"}}],
                "current-context": "x",
            }
        )
    )
    return path


def run_cli(args: list[str], env: dict[str, str]) -> tuple[int, str, str, int]:
    """Exit code, stdout, stderr and peak resident memory (KiB) of one CLI process."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen([*CLI, *args], stdout=out, stderr=err, env={**os.environ, **env}, cwd=ROOT)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return process.returncode, out.read().decode(), err.read().decode(), usage.ru_maxrss


def endless(runs: int) -> None:
    recording, _ = load(RECORDING)
    fake = EndlessCluster(recording.kubernetes, page=1000, no_rollouts=True)
    lock = threading.Lock()

    class Api(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            with lock:
                answer = fake.answer(httpx.Request("GET", "http://127.0.0.1" + self.path))
            self.send_response(answer.status_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serving(Api) as url, tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "opsagent.yaml"
        kube = kubeconfig(Path(tmp) / "kubeconfig", url)
        config.write_text(
            yaml.safe_dump(
                {"sources": {"kubernetes": [{"name": "prod", "auth": "kubeconfig", "kubeconfig": str(kube)}]}}
            )
        )
        env = {"OPSAGENT_CONFIG": str(config), "OPSAGENT_DATA_DIR": str(Path(tmp) / "data")}
        crashes = 0
        for i in range(1, runs + 1):
            before = len(fake.requests)
            code, out, err, _ = run_cli(
                ["investigate", "--service", "frontend", "--symptom", "errors", "--json", "--no-lessons"], env
            )
            try:
                unreadable = json.loads(out)["unreadable_sources"]
                report = True
            except (ValueError, KeyError):
                unreadable, report = {}, False
            cancelled = "CancelledError" in out + err
            crashes += (not report) or cancelled or code not in (0, 3)
            kube_unread = {k: v for k, v in unreadable.items() if k.startswith(("kubernetes", "changes"))}
            print(
                f"run {i}: exit {code}, report {'yes' if report else 'NO'},"
                f" CancelledError {'YES' if cancelled else 'no'}, requests {len(fake.requests) - before},"
                f" cluster unreadable {kube_unread or 'none'}"
            )
        print(f"{runs} runs, {crashes} without a report or with CancelledError")


def huge(mb: int) -> None:
    head = b'{"kind": "PodList", "apiVersion": "v1", "metadata": {}, "status": "success", "items": ['

    class Huge(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b" " * (1 << 20)
            try:
                for i in range(mb):
                    data = head + chunk if i == 0 else chunk
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading: what the cap is for

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serving(Huge) as url, tempfile.TemporaryDirectory() as tmp:
        kube = kubeconfig(Path(tmp) / "kubeconfig", url)
        sources = {
            "loki": {"loki": [{"name": "loki", "url": url}]},
            "kubernetes": {"kubernetes": [{"name": "prod", "auth": "kubeconfig", "kubeconfig": str(kube)}]},
        }
        for kind, section in sources.items():
            config = Path(tmp) / f"{kind}.yaml"
            config.write_text(yaml.safe_dump({"sources": section}))
            env = {"OPSAGENT_CONFIG": str(config), "OPSAGENT_DATA_DIR": str(Path(tmp) / "data"), "COLUMNS": "400"}
            code, out, err, rss = run_cli(["doctor"], env)
            said = " ".join(out.replace("│", " ").split())  # the table's cells, unwrapped enough to search
            cap = f"{MAX_ANSWER_BYTES:,} bytes"
            print(
                f"{kind}: {mb} MB answer, doctor exit {code}, peak RSS {rss / 1024:.0f} MiB,"
                f" names the cap ({cap}): {'yes' if cap in said else 'NO'},"
                f" traceback {'YES' if 'Traceback' in out + err else 'no'}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    sub.add_parser("endless").add_argument("--runs", type=int, default=20)
    sub.add_parser("huge").add_argument("--mb", type=int, default=200)
    args = parser.parse_args()
    if args.mode == "endless":
        endless(args.runs)
    else:
        huge(args.mb)


if __name__ == "__main__":
    main()
