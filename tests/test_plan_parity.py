"""The service and the CLI investigate a recorded incident alike: the service's fixture provider
builds its signal catalog where the CLI, replay and the benchmarks build theirs
(``opsagent.pipeline.replay_catalog``, signal discovery included), so the same recording gets the
same catalog and the same answer whichever way it is investigated."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import yaml

from opsagent.catalog import default_catalog
from opsagent.fixtures import load
from opsagent.pipeline import investigate, investigate_recording, load_default_playbooks, replay_catalog
from opsagent.reasoner import PlaybookReasoner
from opsagent.service.provider import FixtureProvider
from tests.conftest import INCIDENTS

#: Metrics only, with metric names of its own: without its ``signals:`` block, discovery maps them.
UNMAPPED = INCIDENTS / "live-event-traffic-surge"


def _without_signals(tmp_path: Path) -> Path:
    copy = tmp_path / "incidents" / UNMAPPED.name
    shutil.copytree(UNMAPPED, copy)
    header = yaml.safe_load((copy / "incident.yaml").read_text(encoding="utf-8"))
    del header["signals"]  # a user who never mapped their metric names
    (copy / "incident.yaml").write_text(yaml.safe_dump(header, sort_keys=False), encoding="utf-8")
    return copy


def test_the_service_and_the_cli_build_the_same_catalog(tmp_path: Path) -> None:
    copy = _without_signals(tmp_path)
    recording, _ = load(copy)
    plan = FixtureProvider(copy.parent).plan(recording.alert)
    assert plan is not None and plan.recording is not None
    cli = replay_catalog(recording)
    assert plan.catalog.signals == cli.signals
    discovered = [k for k, v in cli.signals.items() if default_catalog().signals.get(k) != v]
    assert discovered  # the step the provider used to skip: without it the catalogs differ


def test_the_service_and_the_cli_reach_the_same_conclusion(tmp_path: Path) -> None:
    copy = _without_signals(tmp_path)
    recording, _ = load(copy)
    plan = FixtureProvider(copy.parent).plan(recording.alert)
    assert plan is not None
    books = load_default_playbooks()
    service = asyncio.run(
        investigate(
            plan.alert,
            sources=plan.sources,
            catalog=plan.catalog,
            reasoner=PlaybookReasoner(books),
            topology=plan.topology,
            recording=plan.recording,
            incident_id=recording.slug,
            now=recording.window.end,
        )
    )
    cli = asyncio.run(investigate_recording(recording, playbooks=books))
    assert service.root_cause == cli.root_cause and service.status == cli.status
    assert [(s.component, s.kind, s.status) for s in service.suspects] == [
        (s.component, s.kind, s.status) for s in cli.suspects
    ]
    assert service.evidence == cli.evidence
