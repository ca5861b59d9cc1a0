"""One investigation's plan: everything it runs with, built in one place.

An investigation reads a :class:`Reading` (the alert as the data knows it, the sources, the signal
catalog, the call graph known beforehand, and the recording when it replays one) and is run by a
reasoner under a strategy and a budget, with the lessons it may recall. A :class:`Planner` holds
what a deployment chose (its settings: playbooks, strategy, budget, how many lessons to recall,
where links point) and turns each reading into an :class:`InvestigationPlan`;
:func:`replay_reading` is the one place a recording's catalog (with signal discovery) and its
sources are built. The CLI, the service's worker, the MCP server, replay and the benchmarks all
plan here, and :func:`opsagent.pipeline.investigate` takes the plan whole, so two ways into the
same incident cannot wire it differently (``tests/test_plan_parity.py`` holds them to it).

This module builds; it reads no telemetry and reasons about nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, ConfigDict

from opsagent import ranking
from opsagent.catalog import SignalCatalog, default_catalog
from opsagent.correlation import storm_of
from opsagent.discovery import discover, metric_names
from opsagent.fixtures import Edge, Recording, SignalDef
from opsagent.links import LinkSettings
from opsagent.loop import Budget
from opsagent.models import Alert, JoinedAlert, Lesson
from opsagent.packaged import playbooks_dir
from opsagent.playbooks import Playbook, load_playbooks
from opsagent.reasoner import PlaybookReasoner, Reasoner
from opsagent.sources import Sources
from opsagent.sources.replay import replay_sources
from opsagent.stats import Sample
from opsagent.strategies import strategy as strategy_named

if TYPE_CHECKING:
    from opsagent.settings import Settings


def load_default_playbooks(directory: Path | None = None) -> list[Playbook]:
    """The playbooks in ``directory``, or the shipped ones (inside the installed package, or the
    checkout's ``playbooks/`` from source)."""
    return load_playbooks(directory or playbooks_dir())


class SeriesReader(Protocol):
    """Raw samples of a query, for the report page's charts (a live Prometheus answers with
    ``query_range``, a recording from its series)."""

    async def series(self, *, query: str, spec: SignalDef, start: datetime, end: datetime) -> list[Sample]: ...


@dataclass(frozen=True)
class Reading:
    """What an investigation reads. ``alert`` is the alert as the data knows it (a replayed incident
    keeps its recorded times, so the window holds its telemetry); ``recording`` gives the window and
    baseline of a recorded incident; ``counts_work``: the budget's seconds count work done, not the
    machine's (a replay's: its report must not depend on how busy the machine is), and no source is
    timed out; ``close`` releases what live sources hold, once the investigation is over."""

    name: str
    alert: Alert
    sources: Sources
    catalog: SignalCatalog
    topology: list[Edge] = field(default_factory=list)
    recording: Recording | None = None
    counts_work: bool = False
    series: SeriesReader | None = None
    close: Callable[[], Awaitable[None]] | None = None


def replay_catalog(recording: Recording, *, use_signals: bool = True) -> SignalCatalog:
    """The signal catalog a recorded incident is investigated with: the defaults, its ``signals:``
    block (unless ``use_signals`` is off, as for a user who never wrote one), and the metric names
    discovered by convention."""
    catalog = default_catalog().merged(recording.signals if use_signals else {})
    if ranking.on("discovery"):  # metric names the catalog has never seen, mapped by convention
        catalog = catalog.with_discovered(discover(recording.metrics), metric_names(recording.metrics))
    return catalog


def replay_reading(recording: Recording, *, use_signals: bool = True) -> Reading:
    """A recorded incident, read by the replay sources through :func:`replay_catalog`."""
    catalog = replay_catalog(recording, use_signals=use_signals)
    sources = replay_sources(recording, catalog)
    return Reading(
        name=f"fixture:{recording.slug}",
        alert=recording.alert,
        sources=sources,
        catalog=catalog,
        topology=recording.topology,
        recording=recording,
        counts_work=True,
    )


class PlanSummary(BaseModel):
    """A plan as values, to compare two plans (the service's and the CLI's for the same recording)."""

    model_config = ConfigDict(frozen=True)

    reading: str
    alert: dict[str, str]
    sources: list[str]
    signals: dict[str, str]
    topology: list[tuple[str, str]]
    reasoner: str
    playbooks: list[str]
    strategy: str
    budget: dict[str, float]
    lessons: list[str]
    lessons_top_k: int
    lessons_cap: int
    counts_work: bool
    joined: list[str]


@dataclass(frozen=True)
class InvestigationPlan:
    """Everything one investigation runs with. Built by a :class:`Planner`, run by
    :func:`opsagent.pipeline.investigate`."""

    reading: Reading
    reasoner: Reasoner
    playbooks: tuple[Playbook, ...]
    strategy: str
    budget: Budget
    lessons: tuple[Lesson, ...] = ()
    lessons_top_k: int = 3
    lessons_cap: int = 5
    links: LinkSettings | None = None
    incident_id: str | None = None
    joined: tuple[JoinedAlert, ...] = ()

    def summary(self) -> PlanSummary:
        sources = self.reading.sources
        return PlanSummary(
            reading=self.reading.name,
            alert=dict(sorted(self.reading.alert.labels.items())),
            sources=sorted(f"{k.value}:{getattr(sources, k.value).name}" for k in sources.kinds()),
            signals={name: spec.model_dump_json() for name, spec in sorted(self.reading.catalog.signals.items())},
            topology=sorted((e.caller, e.callee) for e in self.reading.topology),
            reasoner=self.reasoner.name,
            playbooks=sorted(p.id for p in self.playbooks),
            strategy=self.strategy,
            budget={k: float(v) for k, v in vars(self.budget).items()},
            lessons=[lesson.id for lesson in self.lessons],
            lessons_top_k=self.lessons_top_k,
            lessons_cap=self.lessons_cap,
            counts_work=self.reading.counts_work,
            joined=[f"{j.alertname}:{','.join(j.services)}" for j in self.joined],
        )


@dataclass(frozen=True)
class Planner:
    """What a deployment chose, applied alike to every investigation it plans. Holds values only
    (no connection), so the service hands it to its worker processes."""

    playbooks: tuple[Playbook, ...]
    strategy: str = "hybrid"
    budget: Budget = field(default_factory=Budget)
    lessons_top_k: int = 3
    lessons_cap: int = 5
    links: LinkSettings | None = None

    def __post_init__(self) -> None:
        strategy_named(self.strategy)  # a bad name fails here, before anything is read

    @classmethod
    def shipped(cls, *, strategy: str = "hybrid", budget: Budget | None = None) -> Planner:
        """The shipped playbooks and the defaults: what a replay without configuration runs with."""
        return cls(playbooks=tuple(load_default_playbooks()), strategy=strategy, budget=budget or Budget())

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        playbooks: Path | Sequence[Playbook] | None = None,
        strategy: str = "hybrid",
        budget: Budget | None = None,
    ) -> Planner:
        """The settings' choices; ``playbooks`` (a directory, or playbooks already loaded),
        ``strategy`` and ``budget`` are what a command line may ask for instead."""
        books = (
            list(playbooks)
            if playbooks is not None and not isinstance(playbooks, Path)
            else load_default_playbooks(playbooks or settings.playbooks_dir)
        )
        return cls(
            playbooks=tuple(books),
            strategy=strategy,
            budget=budget or Budget(),
            lessons_top_k=settings.lessons_top_k,
            lessons_cap=settings.lessons_recent,
            links=settings.link_settings(),
        )

    def plan(
        self,
        reading: Reading,
        *,
        reasoner: Reasoner | None = None,
        lessons: Sequence[Lesson] = (),
        incident_id: str | None = None,
        joined: Sequence[JoinedAlert] | None = None,
        links: LinkSettings | None = None,
    ) -> InvestigationPlan:
        """The plan for one reading. ``reasoner``: another than the playbooks' (a model); ``joined``:
        the alerts of a storm joined to the reading's alert (by default, a recording's own storm);
        ``incident_id``: by default a recording's slug; ``links``: instead of the settings' (the
        service adds the Alertmanager a notification came from)."""
        recording = reading.recording
        if joined is None:
            joined = storm_of(recording.alert, recording.alerts, recording.topology) if recording is not None else []
        return InvestigationPlan(
            reading=reading,
            reasoner=reasoner or PlaybookReasoner(self.playbooks),
            playbooks=self.playbooks,
            strategy=self.strategy,
            budget=self.budget,
            lessons=tuple(lessons),
            lessons_top_k=self.lessons_top_k,
            lessons_cap=self.lessons_cap,
            links=links or self.links,
            incident_id=incident_id or (recording.slug if recording is not None else None),
            joined=tuple(joined),
        )
