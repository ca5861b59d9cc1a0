"""Replay scoring: run recorded incidents, compare each report's suspects with the truth.

AC@k is the share of incidents whose true component is among the first k suspects; Avg@5 is the
mean of AC@1..AC@5; kind accuracy compares the top suspect's fault kind with the true kind. Where
the truth names the change that caused an incident (``truth.change_ids``), change@k is the share of
those incidents whose change is among the first k changes of the report (a rollout is hit by its id
or any of its steps' ids). Where the truth says which alerts of an alert storm join the incident and
which stay apart (``truth.joined``, ``truth.apart``), the storm is grouped right when the incident
joined exactly the first and none of the second. Truth is read here, after the investigation, and
never before.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from statistics import median

from pydantic import BaseModel

from opsagent.errors import FixtureError, Problem
from opsagent.fixtures import Truth, load, read_header, read_tags
from opsagent.lessons import (
    LessonMemory,
    about_environment,
    about_the_environment,
    from_truth,
    learn_environment,
    misled_by,
)
from opsagent.loop import Budget
from opsagent.models import Action, Report
from opsagent.pipeline import investigate
from opsagent.plan import Planner, load_default_playbooks, replay_reading
from opsagent.playbooks import Playbook
from opsagent.reasoner import PlaybookReasoner


class IncidentScore(BaseModel):
    slug: str
    truth_service: str
    truth_kind: str
    expected: str
    status: str
    top: list[tuple[str, str]]
    rank: int | None
    hit1: bool
    hit3: bool
    kind_hit: bool
    verdict_ok: bool
    truth_changes: list[str] = []
    top_changes: list[str] = []
    change_rank: int | None = None
    joined: list[str] = []
    storm_ok: bool | None = None
    steps: int
    tool_calls: int
    tokens: int
    wall_ms: float


class Scoreboard(BaseModel):
    strategy: str
    scores: list[IncidentScore]

    def ac(self, k: int) -> float:
        if not self.scores:
            return 0.0
        return sum(1 for s in self.scores if s.rank is not None and s.rank <= k) / len(self.scores)

    @property
    def with_changes(self) -> list[IncidentScore]:
        """The incidents whose truth names the change that caused them."""
        return [s for s in self.scores if s.truth_changes]

    def change_at(self, k: int) -> float | None:
        """change@k: the share of incidents with a true change whose change is among the first k; None
        when no truth names a change."""
        scored = self.with_changes
        if not scored:
            return None
        return sum(1 for s in scored if s.change_rank is not None and s.change_rank <= k) / len(scored)

    @property
    def avg5(self) -> float:
        return sum(self.ac(k) for k in range(1, 6)) / 5

    @property
    def kind_accuracy(self) -> float:
        scored = [s for s in self.scores if s.truth_kind != "unknown"]
        return sum(s.kind_hit for s in scored) / len(scored) if scored else 0.0

    @property
    def verdict_accuracy(self) -> float:
        return sum(s.verdict_ok for s in self.scores) / len(self.scores) if self.scores else 0.0

    @property
    def storms(self) -> list[IncidentScore]:
        """The incidents whose truth says which of their alerts join them and which stay apart."""
        return [s for s in self.scores if s.storm_ok is not None]

    def mean(self, attr: str) -> float:
        return sum(getattr(s, attr) for s in self.scores) / len(self.scores) if self.scores else 0.0

    def p50_wall_ms(self) -> float:
        return median(s.wall_ms for s in self.scores) if self.scores else 0.0


def score(slug: str, report: Report, truth: Truth) -> IncidentScore:
    components = [s.component for s in report.suspects]
    rank = components.index(truth.target) + 1 if truth.target in components else None
    top = report.suspects[0] if report.suspects else None
    expected = truth.expect or ("inconclusive" if truth.kind == "unknown" else "confirmed")
    if expected == "inconclusive":
        verdict_ok = report.status == "inconclusive"
    else:
        verdict_ok = (
            report.status in ("confirmed", "probable")
            and report.root_cause is not None
            and report.root_cause.component == truth.target
            and report.root_cause.kind == truth.kind
        )
    joined = [a.alertname for a in report.incident.alerts[1:]]
    storm_ok = (
        set(joined) == set(truth.joined) and not set(joined) & set(truth.apart) if truth.joined or truth.apart else None
    )
    change_rank = next((n for n, c in enumerate(report.changes, start=1) if set(c.ids) & set(truth.change_ids)), None)
    return IncidentScore(
        slug=slug,
        truth_service=truth.target,
        truth_kind=truth.kind,
        expected=expected,
        status=report.status,
        top=[(s.component, s.kind) for s in report.suspects[:3]],
        rank=rank,
        hit1=rank == 1,
        hit3=rank is not None and rank <= 3,
        kind_hit=top is not None and top.kind == truth.kind,
        verdict_ok=verdict_ok,
        truth_changes=list(truth.change_ids),
        top_changes=[c.id for c in report.changes[:3]],
        change_rank=change_rank if truth.change_ids else None,
        joined=joined,
        storm_ok=storm_ok,
        steps=report.cost.steps,
        tool_calls=report.cost.tool_calls,
        tokens=report.cost.tokens,
        wall_ms=report.cost.wall_ms,
    )


def fixture_dirs(root: Path) -> list[Path]:
    if (root / "incident.yaml").exists():
        return [root]
    dirs = sorted(p for p in root.iterdir() if (p / "incident.yaml").exists()) if root.is_dir() else []
    if not dirs:
        raise FixtureError([Problem(str(root), "no recorded incidents here (directories with incident.yaml)")])
    return dirs


def in_time_order(root: Path) -> list[Path]:
    """The recorded incidents under ``root`` in the order their alerts fired (``startsAt`` as instants:
    offsets are compared, not text); those that fired at the same instant (a set whose recordings carry
    no time of their own) in case order, by folder name. Only the headers are read; one that cannot be
    read raises :class:`FixtureError` with its problems."""
    return by_start(fixture_dirs(root))


def by_start(dirs: Iterable[Path]) -> list[Path]:
    """The recorded incidents ``dirs`` in the order their alerts fired, as :func:`in_time_order` orders
    them (only their headers are read)."""
    starts = [(read_header(d).alert.starts_at, d.name, d) for d in dirs]
    return [d for _, _, d in sorted(starts)]


def tagged_dirs(root: Path, wanted: dict[str, str]) -> list[Path]:
    """The recorded incidents under ``root`` whose tags match every ``key=value`` wanted (all of
    them when nothing is wanted); an incident without tags matches no tag."""
    dirs = fixture_dirs(root)
    if not wanted:
        return dirs
    chosen = [d for d in dirs if (tags := read_tags(d)) is not None and tags.matches(wanted)]
    if not chosen:
        asked = ", ".join(f"{k}={v}" for k, v in wanted.items())
        raise FixtureError([Problem(str(root), f"no recorded incident here is tagged {asked}")])
    return chosen


async def replay(
    root: Path,
    *,
    strategy_name: str = "hybrid",
    playbooks: Sequence[Playbook] | None = None,
    budget: Budget | None = None,
    memory: LessonMemory | None = None,
    use_lessons: bool = False,
    learn: bool = False,
    on_report: Callable[[str, Report, IncidentScore], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    dirs: Sequence[Path] | None = None,
    planner: Planner | None = None,
) -> Scoreboard:
    """Replay recorded incidents; with ``learn``, write what each teaches (checked against its truth)
    into ``memory`` before the next one; with ``use_lessons``, investigations retrieve from it.
    ``planner``: the choices to investigate with (the settings', as ``opsagent replay`` passes
    them); without one, ``playbooks`` (by default the shipped ones), ``strategy_name`` and ``budget``."""
    if planner is None:
        books = list(playbooks) if playbooks is not None else load_default_playbooks()
        planner = Planner(playbooks=tuple(books), strategy=strategy_name, budget=budget or Budget())
    first_checks = PlaybookReasoner(planner.playbooks).first_checks()
    scores = []
    for directory in dirs if dirs is not None else fixture_dirs(root):
        lessons = memory.lessons() if memory is not None and use_lessons else []
        recording, truth = load(directory)
        report = await investigate(planner.plan(replay_reading(recording), lessons=lessons), clock=clock)
        if truth is None:
            raise FixtureError(
                [Problem(str(directory / "incident.yaml"), "replay scoring needs a truth", field="truth")]
            )
        result = score(directory.name, report, truth)
        scores.append(result)
        if memory is not None:
            learn_from(memory, report, truth, result, first_checks=first_checks if learn else None)
        if on_report is not None:
            on_report(directory.name, report, result)
    return Scoreboard(strategy=planner.strategy, scores=scores)


def learn_from(
    memory: LessonMemory,
    report: Report,
    truth: Truth,
    result: IncidentScore,
    *,
    first_checks: Mapping[str, Action] | None,
) -> None:
    """After a replayed investigation: count what the lessons it used did (helped, misled), and with
    ``first_checks`` (the playbooks' first check per kind) store what its truth teaches."""
    top = report.suspects[0].component if report.suspects else None
    misled = misled_by(report.lessons_used, truth.target, truth.kind, top=top)
    acted = [u.lesson_id for u in report.lessons_used if u.acted and u.lesson_id not in misled]
    memory.count_use([u.lesson_id for u in report.lessons_used])
    memory.count_use(misled, counter="misled")
    # a lesson about the environment helped where the top suspect was right; one about a refuted kind,
    # where the verdict was
    helped = [
        u.lesson_id
        for u in report.lessons_used
        if u.lesson_id in acted and (result.hit1 if about_the_environment(u) else result.verdict_ok)
    ]
    memory.count_use(helped, counter="helped")
    if first_checks is not None:
        stamp = report.incident.window.end
        for lesson in from_truth(report, truth, stamp, first_checks=first_checks):
            memory.upsert_lesson(lesson)
        taught = about_environment(report, truth.target, truth.kind, stamp, first_checks=first_checks)
        learn_environment(memory, taught, now=stamp)
