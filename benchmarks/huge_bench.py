"""Huge inputs in bounded memory: a log file of about 1 GB summarised, and a trace of a million spans
analysed, each streamed from its file record by record; prints CPU seconds and peak RSS of each.

    python benchmarks/huge_bench.py [--log-mb 1024] [--spans 1000000] [--repeat 1]

The files are generated into a temporary directory (removed afterwards, never in the repository):
``logs.jsonl``, lines of a few dozen shapes whose numbers, ids and addresses make most lines
distinct, over 80 minutes; ``traces.jsonl``, traces of ten spans over forty services, parents and
children linked. Each command runs in a fresh process beside its anchor, alternately:

- anchor: read the file line by line and ``json.loads`` each line, keeping nothing (the floor of
  any reader of the file);
- logs: :func:`opsagent.fixtures.stream` into :class:`opsagent.logsummary.LogSummariser` (the whole
  summary: templates, counts, new and bursting, histograms);
- traces: :func:`opsagent.fixtures.stream` into :func:`opsagent.analysis.spans.span_times`, then
  the per-service trace summary over every service;
- columns: the same, the file read by :func:`opsagent.fixtures.read_spans` straight into columns,
  as ``opsagent investigate`` loads a recording's spans.

CPU is user + system of the child alone (``os.wait4``), peak is its VmHWM (its own peak, not the
parent's it inherits at fork). Memory is bounded when the peak does not grow with the file: the
log summary keeps caches and templates of bounded size; the span analysis keeps eight numbers a
span and the ids linking parents to children, a small constant per span, never the records.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

T0 = datetime(2026, 3, 17, 13, 0, tzinfo=UTC)
BASELINE_MIN, WINDOW_MIN = 50, 30
SERVICES = [f"svc-{i:02d}" for i in range(40)]

_SHAPES = [
    "GET /api/v1/orders/{n} 200 {ms}ms from 10.{a}.{b}.{c} request_id={hex}",
    "user u{n} logged in from 10.{a}.{b}.{c} session {hex}",
    "payment {hex} for order {n} authorised in {ms} ms",
    "cache miss for key product:{n}:{a} after {ms} ms",
    "connection to db-{a}.internal:5432 reset after {ms} ms (attempt {b})",
    "ERROR upstream timeout calling inventory for sku {n} after {ms} ms trace {hex}",
    "WARN retry {b} of 5 for job {hex} queue depth {n}",
    "shipped parcel {n} to region {a} carrier slot {b} in {ms}ms",
]
_LEVELS = ["INFO", "INFO", "INFO", "INFO", "DEBUG", "ERROR", "WARN", "INFO"]


def write_logs(path: Path, megabytes: int, rnd: random.Random) -> int:
    """About ``megabytes`` MiB of log lines; the number written."""
    limit, size, n = megabytes * 2**20, 0, 0
    span_s = (BASELINE_MIN + WINDOW_MIN) * 60
    with open(path, "w", encoding="utf-8") as out:
        while size < limit:
            chunk = []
            for _ in range(10_000):
                k = rnd.randrange(len(_SHAPES))
                message = _SHAPES[k].format(
                    n=rnd.randrange(10**6),
                    ms=rnd.randrange(2000),
                    a=rnd.randrange(256),
                    b=rnd.randrange(256),
                    c=rnd.randrange(256),
                    hex=f"{rnd.getrandbits(64):016x}",
                )
                ts = T0 + timedelta(seconds=span_s * n / (limit / 150))  # about 150 bytes a line
                line = json.dumps(
                    {
                        "ts": ts.isoformat().replace("+00:00", "Z"),
                        "service": SERVICES[k * 5 + rnd.randrange(5)],
                        "level": _LEVELS[k],
                        "message": message,
                    }
                )
                chunk.append(line)
                n += 1
            text = "\n".join(chunk) + "\n"
            out.write(text)
            size += len(text)
    return n


def write_traces(path: Path, spans: int, rnd: random.Random) -> int:
    """``spans`` spans in traces of ten (a root calling a chain and a fan-out); the number written."""
    span_s = (BASELINE_MIN + WINDOW_MIN) * 60
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        trace = 0
        while written < spans:
            trace += 1
            tid = f"{rnd.getrandbits(128):032x}"
            start_ns = int((T0.timestamp() + span_s * written / spans) * 1e9)
            ids = [f"{rnd.getrandbits(64):016x}" for _ in range(10)]
            lines = []
            for i in range(min(10, spans - written)):
                parent = None if i == 0 else ids[(i - 1) // 3]
                record = {
                    "trace_id": tid,
                    "span_id": ids[i],
                    "parent_id": parent,
                    "service": SERVICES[(trace + i) % len(SERVICES)],
                    "operation": f"op-{i}",
                    "start": start_ns + i * 1_000_000,
                    "duration_us": float(rnd.randrange(100, 50_000)),
                    "status": "error" if rnd.random() < 0.01 else "ok",
                }
                lines.append(json.dumps(record))
            out.write("\n".join(lines) + "\n")
            written += len(lines)
    return written


# ---------------------------------------------------------------- the children


def peak_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def child(kind: str, path: Path) -> None:
    if kind == "read":
        n = 0
        with open(path, "rb") as fh:
            for line in fh:
                json.loads(line)
                n += 1
        print(json.dumps({"records": n, "peak_mib": peak_mib()}))
        return
    from opsagent.fixtures import stream
    from opsagent.models import TimeRange

    baseline = TimeRange(start=T0, end=T0 + timedelta(minutes=BASELINE_MIN))
    window = TimeRange(start=baseline.end, end=baseline.end + timedelta(minutes=WINDOW_MIN))
    if kind == "logs":
        from opsagent.logsummary import LogSummariser

        data = LogSummariser().summarise(stream(path, "logs"), baseline=baseline, window=window, service=None)
        print(json.dumps({"records": data.total + data.outside_range, "peak_mib": peak_mib()}))
        return
    from opsagent.analysis.spans import span_times, trace_summary
    from opsagent.incident import open_incident
    from opsagent.models import Alert

    alert = Alert(labels={"alertname": "HighLatency", "service": SERVICES[0]}, startsAt=baseline.end)
    incident = open_incident(alert, window=TimeRange(start=T0, end=window.end), baseline=baseline)
    if kind == "columns":
        from opsagent.fixtures import read_spans

        times = span_times(read_spans(path))
    else:
        times = span_times(stream(path, "traces"))
    summary = trace_summary(times, [], incident=incident, service=None)
    print(json.dumps({"records": len(times), "services": len(summary.services), "peak_mib": peak_mib()}))


def run(kind: str, path: Path) -> tuple[float, float, int]:
    """CPU seconds, peak MiB and records of one child."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", kind, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    # the child's output is a line of JSON: read after it exits (wait4 reaps it and gives its usage)
    _, status, usage = os.wait4(proc.pid, 0)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read().decode(), proc.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{kind} {path.name} failed: {err[-2000:]}")
    said = json.loads(out.strip().splitlines()[-1])
    return usage.ru_utime + usage.ru_stime, said["peak_mib"], said["records"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log-mb", type=int, default=1024, help="size of the log file in MiB")
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return
    rnd = random.Random(24)
    rows = []
    with tempfile.TemporaryDirectory(prefix="opsagent-huge-") as tmp:
        logs, traces = Path(tmp) / "logs.jsonl", Path(tmp) / "traces.jsonl"
        t = time.perf_counter()
        write_logs(logs, args.log_mb, rnd)
        write_traces(traces, args.spans, rnd)
        print(f"generated in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        for path, kinds in ((logs, ("logs",)), (traces, ("traces", "columns"))):
            size = path.stat().st_size / 2**20
            runs: dict[str, list[tuple[float, float, int]]] = {kind: [] for kind in ("read", *kinds)}
            for _ in range(args.repeat):
                for kind in runs:
                    runs[kind].append(run(kind, path))
            for kind, done in runs.items():
                name = f"{path.name}: " + ("read + json.loads (anchor)" if kind == "read" else kind)
                rows.append((name, size, done[0][2], median(r[0] for r in done), median(r[1] for r in done)))
    print(f"median of {args.repeat} run(s), one process each, anchor and command alternately")
    print(f"{'what':<40}{'MiB':>7}{'records':>11}{'CPU s':>8}{'peak MiB':>10}")
    for name, size, records, cpu, peak in rows:
        print(f"{name:<40}{size:>7.0f}{records:>11,}{cpu:>8.1f}{peak:>10.0f}")


if __name__ == "__main__":
    main()
