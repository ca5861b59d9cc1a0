"""When the incident began: an alert fires once its condition has held a while (``for:``), so the onset
is where the run of shifted samples reaching the alert's start began — and a noisy series whose mean
merely splits best somewhere in the twenty minutes before the alert does not move it."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from opsagent.analysis.series import held_since, is_brief
from opsagent.fixtures import load
from opsagent.incident import open_incident
from opsagent.pipeline import investigate_recording, refine_onset
from opsagent.plan import replay_reading
from tests.conftest import ROOT

NEZHA_TT = ROOT.parent / "shared" / "datasets" / "rca-dev" / "nezha-tt"
START = datetime(2026, 3, 1, 14, 5, tzinfo=UTC)  # the alert's start
T0 = START - timedelta(minutes=65)


def _recording(tmp_path: Path, latency: list[float]) -> Path:
    """An alert on api's latency at START, with one-minute samples of it from T0 on."""
    d = tmp_path / "inc"
    d.mkdir()
    header = {
        "alert": {
            "labels": {"alertname": "HighLatency", "service": "api"},
            "annotations": {"summary": "api p99 latency above its objective"},
            "startsAt": START.isoformat().replace("+00:00", "Z"),
        },
        "window": {
            "start": T0.isoformat().replace("+00:00", "Z"),
            "end": (START + timedelta(minutes=7)).isoformat().replace("+00:00", "Z"),
        },
        "signals": {"latency_p99": {"query": 'latency_p99_seconds{service="$service"}', "unit": "seconds"}},
    }
    (d / "incident.yaml").write_text(yaml.safe_dump(header))
    samples = [[T0.timestamp() + 60 * i, v] for i, v in enumerate(latency)]
    series = {"labels": {"__name__": "latency_p99_seconds", "service": "api"}, "samples": samples}
    (d / "metrics.jsonl").write_text(json.dumps(series) + "\n")
    return d


def _onset(d: Path) -> datetime:
    recording, _ = load(d)
    return asyncio.run(investigate_recording(recording)).incident.onset


def test_an_alert_held_for_minutes_began_where_its_shift_did(tmp_path: Path) -> None:
    # Steady at 0.1 s, then 0.9 s from four minutes before the alert fired (its ``for: 4m``).
    latency = [0.1 + 0.005 * (i % 3) for i in range(61)] + [0.9] * 11
    assert _onset(_recording(tmp_path, latency)) == START - timedelta(minutes=4)


def test_the_held_run_starts_where_every_sample_since_has_been_shifted() -> None:
    samples = [(60.0 * i, v) for i, v in enumerate([1, 1, 9, 1, 9, 9, 9, 9, 9])]
    assert held_since(samples, onset=420, centre=1, away=1, least=5) == 240  # 9s from minute 4 on
    assert held_since(samples, onset=240, centre=1, away=1, least=5) is None  # minute 3 was normal
    # a shortfall (a success rate's fall) is a shift downwards
    assert held_since([(0.0, 100), (60.0, 80), (120.0, 70)], onset=180, centre=100, away=-1, least=5) == 60


def test_one_sample_no_farther_than_before_onset_is_brief_but_one_farther_or_two_are_not() -> None:
    jitter = [(60.0 * i, v) for i, v in enumerate([1, 1, 8, 1, 1, 1, 1, 7])]  # onset at minute 5
    assert is_brief(jitter, onset=300, end=480, centre=1, away=1, least=5)
    farther = [*jitter[:-1], (420.0, 20)]  # farther than it ever went before
    assert not is_brief(farther, onset=300, end=480, centre=1, away=1, least=5)
    held = [*jitter[:-2], (360.0, 7), (420.0, 7)]  # two samples: it holds
    assert not is_brief(held, onset=300, end=480, centre=1, away=1, least=5)
    assert not is_brief(jitter[:6], onset=300, end=480, centre=1, away=1, least=5)  # one sample after onset
    calm = [(60.0 * i, v) for i, v in enumerate([100, 100, 100, 100, 100, 100, 72, 100])]  # a success rate
    assert not is_brief(calm, onset=300, end=480, centre=100, away=-1, least=5)  # it never fell before


@pytest.mark.skipif(not NEZHA_TT.is_dir(), reason="../shared/datasets/rca-dev is not here")
def test_a_noisy_alert_signal_does_not_move_the_onset_of_real_incidents() -> None:
    """TrainTicket's frontend latency percentiles jump every few minutes; the faults were injected about a
    minute before each alert. A mean that splits best a quarter of an hour earlier is not the onset."""
    cases = sorted(p for p in NEZHA_TT.iterdir() if (p / "incident.yaml").exists())
    moved = []
    for d in cases:
        recording, _ = load(d)
        reading = replay_reading(recording)
        provisional = open_incident(reading.alert, window=recording.window, baseline=recording.baseline)
        onset = asyncio.run(refine_onset(reading.alert, reading.sources, reading.catalog, provisional))
        if reading.alert.starts_at - onset > timedelta(minutes=3):
            moved.append((d.name, onset))
    assert moved == []
