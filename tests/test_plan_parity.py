"""The service and the CLI plan an investigation alike: the worker plans a job with the
:class:`~opsagent.plan.Planner` made from the service's settings, ``opsagent investigate RECORDING``
with the one made from the same settings, and both read a recorded incident through
:func:`~opsagent.plan.replay_reading` (its catalog with signal discovery), so the same recording gets
the same plan and the same answer whichever way it is investigated."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import structlog
import yaml
from structlog.testing import capture_logs

from opsagent.catalog import default_catalog
from opsagent.cli.investigate import recorded_plan
from opsagent.fixtures import load
from opsagent.models import Lesson
from opsagent.pipeline import investigate
from opsagent.plan import Planner, replay_catalog
from opsagent.service.provider import FIXTURE_LABEL, FixtureProvider
from opsagent.service.worker import JobInput, Worker, worker_config
from opsagent.settings import Settings
from tests.conftest import INCIDENTS
from tests.service_support import notification, settings
from tests.test_lessons import lesson

#: Metrics only, with metric names of its own: without its ``signals:`` block, discovery maps them.
UNMAPPED = INCIDENTS / "live-event-traffic-surge"


def _without_signals(tmp_path: Path) -> Path:
    copy = tmp_path / "incidents" / UNMAPPED.name
    shutil.copytree(UNMAPPED, copy)
    header = yaml.safe_load((copy / "incident.yaml").read_text(encoding="utf-8"))
    del header["signals"]  # a user who never mapped their metric names
    (copy / "incident.yaml").write_text(yaml.safe_dump(header, sort_keys=False), encoding="utf-8")
    return copy


def _job(path: Path) -> JobInput:
    """The webhook job for a recorded incident's alert, as Alertmanager would send it."""
    alert = yaml.safe_load((path / "incident.yaml").read_text(encoding="utf-8"))["alert"]
    alert["labels"][FIXTURE_LABEL] = path.name
    alert["status"] = "firing"
    return JobInput(job_id=1, incident_id="inc-1", payload=json.dumps(notification([alert]), default=str))


def _lessons() -> list[Lesson]:
    return [lesson(id="L-1")]


def _settings(tmp_path: Path, fixtures: Path) -> Settings:
    # choices away from the defaults, so that a path that ignored them would show
    return settings(tmp_path, fixtures_dir=fixtures, lessons_top_k=7, lessons_recent=2)


def test_the_service_and_the_cli_build_the_same_plan(tmp_path: Path) -> None:
    copy = _without_signals(tmp_path)
    config = _settings(tmp_path, copy.parent)
    lessons = _lessons()
    service = Worker(worker_config(config)).plan(_job(copy), lessons)
    cli = recorded_plan(Planner.from_settings(config), copy, lessons=lessons)
    assert service.summary() == cli.summary()
    summary = cli.summary()
    assert (summary.lessons_top_k, summary.lessons_cap, summary.lessons) == (7, 2, [lessons[0].id])
    assert summary.counts_work and summary.reading == f"fixture:{copy.name}"
    discovered = [k for k, v in cli.reading.catalog.signals.items() if default_catalog().signals.get(k) != v]
    assert discovered  # the step the service's provider once skipped: without it the catalogs differ


def test_a_plan_summary_shows_what_differs(tmp_path: Path) -> None:
    copy = _without_signals(tmp_path)
    config = _settings(tmp_path, copy.parent)
    cli = recorded_plan(Planner.from_settings(config), copy)
    other = recorded_plan(Planner.from_settings(config, strategy="react"), copy)
    assert cli.summary() != other.summary() and other.summary().strategy == "react"
    recording, _ = load(copy)
    assert cli.reading.catalog.signals != default_catalog().signals
    assert cli.reading.catalog.signals == replay_catalog(recording).signals


def test_a_bad_strategy_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="nosuch"):
        Planner.from_settings(_settings(tmp_path, INCIDENTS), strategy="nosuch")


@pytest.fixture
def info_events() -> Iterator[None]:
    """Info events reach the capture whatever level an earlier test configured logging at (the
    filtering wrapper drops them before any processor, capture_logs' included); restored after."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    try:
        yield
    finally:
        structlog.configure(**saved)


@pytest.mark.usefixtures("info_events")
def test_the_service_and_the_cli_reach_the_same_conclusion(tmp_path: Path) -> None:
    copy = _without_signals(tmp_path)
    config = _settings(tmp_path, copy.parent)
    service_plan = Worker(worker_config(config)).plan(_job(copy), [])
    reading = FixtureProvider(copy.parent).reading(service_plan.reading.alert)
    assert reading is not None
    now = datetime(2026, 1, 1, tzinfo=UTC)
    with capture_logs() as logs:
        service = asyncio.run(investigate(service_plan, now=now))
    started = [e for e in logs if e["event"] == "investigation.start"]
    assert [(e["incident_id"], e["reading"], e["strategy"], e["reasoner"]) for e in started] == [
        ("inc-1", f"fixture:{copy.name}", "hybrid", "playbook")
    ]
    cli = asyncio.run(investigate(recorded_plan(Planner.from_settings(config), copy), now=now))
    assert service.root_cause == cli.root_cause and service.status == cli.status
    assert [(s.component, s.kind, s.status) for s in service.suspects] == [
        (s.component, s.kind, s.status) for s in cli.suspects
    ]
    assert service.evidence == cli.evidence
