"""Real data is messy: gaps in series, a pod that appears mid-window, a baseline period with no
metrics, spans with no status, log levels nobody spelled, clocks of another zone inside messages.
None of it may crash an investigation or silently drop a source."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from opsagent.pipeline import investigate_fixture

T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
ONSET = T0 + timedelta(minutes=6)


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _write(path: Path, name: str, records: list[dict]) -> None:
    with (path / f"{name}.jsonl").open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")


def _messy_incident(root: Path) -> Path:
    d = root / "messy"
    d.mkdir()
    header = {
        "alert": {
            "labels": {"alertname": "FrontendLatencyHigh", "service": "web"},
            "annotations": {"summary": "web p90 latency high"},
            "startsAt": _iso(ONSET + timedelta(minutes=1)),
        },
        "window": {"start": _iso(T0), "end": _iso(T0 + timedelta(minutes=10))},
        # a fault-free minute of another period: logs and traces only, no metrics at all
        "baseline": {"start": _iso(T0 + timedelta(minutes=30)), "end": _iso(T0 + timedelta(minutes=33))},
        "topology": [{"caller": "web", "callee": "api"}, {"caller": "api", "callee": "db"}],
        "truth": {"service": "api", "kind": "code_exception", "summary": "api throws"},
    }
    (d / "incident.yaml").write_text(yaml.safe_dump(header), encoding="utf-8")
    minute = lambda m: (T0 + timedelta(minutes=m)).timestamp()  # noqa: E731
    metrics = [
        # gaps: minutes 2 and 7 are missing
        {
            "labels": {"__name__": "pod_latency_ms", "service": "web", "pod": "web-7d9f8-x2kq1"},
            "samples": [[minute(m), 40.0 if m < 6 else 90.0] for m in range(10) if m not in (2, 7)],
        },
        {
            "labels": {"__name__": "pod_latency_ms", "service": "api", "pod": "api-5c6d7-abcde"},
            "samples": [[minute(m), 10.0] for m in range(10)],
        },
        # a pod that appears mid-window (after onset): nothing to compare it with
        {
            "labels": {"__name__": "pod_latency_ms", "service": "api", "pod": "api-5c6d7-fghij"},
            "samples": [[minute(m), 12.0] for m in range(7, 10)],
        },
        {
            "labels": {"__name__": "pod_cpu_usage_rate_percent", "service": "db", "pod": "db-0"},
            "samples": [[minute(m), 20.0] for m in range(10)],
        },
    ]
    _write(d, "metrics", metrics)
    logs = []
    for m in range(10):
        for i in range(3):
            ts = T0 + timedelta(minutes=m, seconds=10 * i)
            logs.append({"ts": _iso(ts), "service": "web", "level": "INFO", "message": "GET /home 200"})
            # the clock printed inside the message is another zone's (UTC+8)
            local = (ts + timedelta(hours=8)).strftime("%H:%M:%S.000")
            logs.append({"ts": _iso(ts), "service": "api", "level": "UNKNOWN", "message": f"{local} handled order"})
            if ts >= ONSET:
                logs.append(
                    {
                        "ts": _iso(ts),
                        "service": "api",
                        "level": "ERROR",
                        "message": f"{local} ERROR o.OrderService#31 order total is negative: NullPointerException",
                    }
                )
    for i in range(9):  # the fault-free baseline minute, logs only
        ts = T0 + timedelta(minutes=30, seconds=20 * i)
        logs.append({"ts": _iso(ts), "service": "api", "level": "UNKNOWN", "message": "09:30:00.000 handled order"})
    _write(d, "logs", logs)
    spans = []
    for n, start in enumerate([T0 + timedelta(minutes=m, seconds=s) for m in (*range(10), 30, 31) for s in (5, 35)]):
        spans.append(
            {
                "trace_id": f"t{n}",
                "span_id": f"w{n}",
                "parent_id": None,
                "service": "web",
                "operation": "GET /home",
                "start": _iso(start),
                "duration_us": 30000,
            }
        )  # no status at all
        spans.append(
            {
                "trace_id": f"t{n}",
                "span_id": f"a{n}",
                "parent_id": f"w{n}",
                "service": "api",
                "operation": "POST /order",
                "start": _iso(start + timedelta(milliseconds=1)),
                "duration_us": 8000,
            }
        )
    _write(d, "traces", spans)
    return d


def test_a_messy_recording_is_investigated_with_every_source_read(tmp_path: Path) -> None:
    report, truth = asyncio.run(investigate_fixture(_messy_incident(tmp_path)))
    assert truth is not None
    assert report.unreadable_sources.keys() <= {"changes"}  # the one kind the recording does not hold
    assert report.suspects and report.suspects[0].component == "api"
    assert report.suspects[0].kind == "code_exception"
    logs = next(o for o in report.observations if o.source == "logs" and o.action.args.get("service") == "api")
    assert "NullPointerException" in logs.text
