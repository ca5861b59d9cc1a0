"""One investigation, end to end: alert -> incident -> strategy -> judge -> conclusion -> report.

This module wires the parts and writes the conclusion; it owns no analysis of its own. Truth never
passes through here: replay scoring reads it beside the report, after the fact.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol, runtime_checkable

import structlog

from adapters.replay import replay_sources
from opsagent import ranking
from opsagent.catalog import SignalCatalog, default_catalog
from opsagent.discovery import discover, metric_names
from opsagent.fixtures import Edge, Recording, Truth, load
from opsagent.incident import open_incident
from opsagent.lessons import retrieve
from opsagent.loop import Budget, Clock, Listener, Meter
from opsagent.models import (
    CHANGE_KINDS,
    Action,
    Alert,
    ChangesData,
    Cost,
    Evidence,
    HypothesisResult,
    Incident,
    Lesson,
    LessonUse,
    MetricsData,
    ModelRecord,
    Observation,
    Report,
    Suspect,
    Symptom,
    TimelineEvent,
)
from opsagent.packaged import playbooks_dir
from opsagent.playbooks import Playbook, load_playbooks
from opsagent.reasoner import PlaybookReasoner, Reasoner
from opsagent.redaction import scrub_model
from opsagent.sources import Sources
from opsagent.strategies import Outcome, reflect, strategy
from opsagent.tools import Toolbox
from opsagent.triage import Triage

log = structlog.get_logger("opsagent.pipeline")

#: The shipped playbooks: inside the installed package, or the checkout's playbooks/ from source.
DEFAULT_PLAYBOOKS = playbooks_dir()

SYMPTOM_SIGNAL = {
    Symptom.latency: "latency_p99",
    Symptom.errors: "error_ratio",
    Symptom.availability: "error_ratio",
    Symptom.traffic: "request_rate",
}


async def refine_onset(
    alert: Alert, sources: Sources, catalog: SignalCatalog, incident: Incident, *, meter: Meter | None = None
) -> datetime:
    """The onset is when the alerting signal shifted, which an alert's ``for:`` delays past."""
    signal = SYMPTOM_SIGNAL.get(incident.symptom)
    if signal is None or sources.metrics is None or signal not in catalog:
        return alert.starts_at
    toolbox = Toolbox(  # held to the investigation's budget, like every other call
        sources=sources,
        catalog=catalog,
        incident=incident,
        timeout_s=meter.budget.timeout_s if meter else Budget().timeout_s,
        remaining=meter.remaining_s if meter else None,
    )
    obs = await toolbox.call(Action(tool="metrics.signal", args={"signal": signal, "service": incident.service}))
    if isinstance(obs.data, MetricsData) and obs.data.stats:
        s = obs.data.stats[0]
        earliest = alert.starts_at.timestamp() - 20 * 60
        if (
            s.change_point is not None
            and s.direction == "up"
            and earliest <= s.change_point.timestamp() <= alert.starts_at.timestamp()
        ):
            return s.change_point
    return alert.starts_at


@runtime_checkable
class PerInvestigation(Protocol):
    """A reasoner with state of its own per investigation (a model's transcript and spending): the
    pipeline binds it to the investigation's meter, and puts its transcript in the report."""

    def bind(self, meter: Meter, observations: Mapping[str, Observation]) -> Reasoner: ...

    def transcript(self) -> ModelRecord: ...


async def investigate(
    alert: Alert,
    *,
    sources: Sources,
    catalog: SignalCatalog,
    reasoner: Reasoner,
    strategy_name: str = "hybrid",
    budget: Budget | None = None,
    topology: list[Edge] | None = None,
    listener: Listener | None = None,
    lessons: Sequence[Lesson] = (),
    lessons_top_k: int = 3,
    lessons_cap: int = 5,
    clock: Clock = time.perf_counter,
    now: datetime | None = None,
    incident_id: str | None = None,
    recording: Recording | None = None,
) -> Report:
    budget = budget or Budget()
    chosen = strategy(strategy_name)
    meter = Meter(budget=budget, clock=clock, listener=listener)
    provisional = open_incident(
        alert,
        window=recording.window if recording else None,
        baseline=recording.baseline if recording else None,
        id=incident_id,
    )
    onset = await refine_onset(alert, sources, catalog, provisional, meter=meter)
    incident = open_incident(
        alert,
        onset=onset,
        window=provisional.window,
        baseline=recording.baseline if recording else None,
        id=provisional.id,
    )
    toolbox = Toolbox(
        sources=sources, catalog=catalog, incident=incident, timeout_s=budget.timeout_s, remaining=meter.remaining_s
    )
    log.info("investigation.start", incident_id=incident.id, strategy=chosen.name, service=incident.service)
    if isinstance(reasoner, PerInvestigation):
        reasoner = reasoner.bind(meter, toolbox.observations)
    outcome = await chosen.run(
        incident,
        reasoner=reasoner,
        toolbox=toolbox,
        meter=meter,
        topology=topology or [],
        recall=lambda found: retrieve(lessons, incident, found, top_k=lessons_top_k, cap=lessons_cap),
    )
    stamp = now or datetime.now(UTC)
    written = [
        lesson for r in outcome.results if (lesson := await reflect(reasoner, incident, r, stamp, toolbox.observations))
    ]
    report = conclude(incident, outcome, toolbox, meter, strategy_name=chosen.name, lessons=written)
    if isinstance(reasoner, PerInvestigation):
        report = report.model_copy(update={"llm": reasoner.transcript()})
    report = scrub_model(report)  # the alert's own text too: no report carries a secret
    log.info("investigation.end", incident_id=incident.id, status=report.status, steps=report.cost.steps)
    return report


# ---------------------------------------------------------------- conclusion


def conclude(
    incident: Incident,
    outcome: Outcome,
    toolbox: Toolbox,
    meter: Meter,
    *,
    strategy_name: str,
    lessons: list[Lesson],
) -> Report:
    ranked = ranking.suspects(
        outcome.proposed,
        outcome.results,
        [(c.component, c.score, c.why) for c in outcome.triage.components],
        outcome.triage.graph,
    )
    exhausted = meter.exhausted(0) or next(
        (r.stop_reason for r in outcome.results if r.stop_reason.startswith("budget")), None
    )
    top = ranked[0] if ranked and ranked[0].status in ("confirmed", "probable") else None
    winner = _result_for(outcome.results, top)
    evidence: list[Evidence] = list(winner.verdict.supporting) if winner else []
    if top is not None and winner is not None:
        status = "confirmed" if top.status == "confirmed" else "probable"
        chain = "; ".join(e.statement for e in evidence)
        statement = f"{winner.hypothesis.statement}. Evidence: {chain}"
        kinds = {e.source for e in evidence}
        confidence = ranking.confidence(status, len(kinds))
        mechanisms = [
            r
            for r in outcome.results
            if r is not winner and r.verdict.status == "confirmed" and r.hypothesis.component == top.component
        ]
        for m in mechanisms:  # the mechanism a change set off belongs to the causal chain
            evidence.extend(e for e in m.verdict.supporting if e not in evidence)
    else:
        status, confidence = "inconclusive", 0.0
        ruled = [r for r in outcome.results if r.verdict.status == "refuted"]
        statement = "inconclusive — needs a human. " + (
            f"Ruled out: {', '.join(f'{r.hypothesis.kind} on {r.hypothesis.component}' for r in ruled)}."
            if ruled
            else "Nothing could be confirmed or ruled out."
        )
        if exhausted:
            statement += f" Stopped early: {exhausted}."
    cost = Cost(
        steps=meter.steps,
        tool_calls=toolbox.calls,
        cache_hits=toolbox.cache_hits,
        tokens=meter.tokens,
        wall_ms=round(meter.elapsed_s() * 1000, 2),
    )
    return Report(
        incident=incident,
        strategy=strategy_name,
        status=status,
        root_cause=top,
        statement=statement,
        confidence=round(confidence, 2),
        evidence=evidence,
        timeline=timeline(incident, outcome.triage, toolbox, evidence),
        results=outcome.results,
        suspects=ranked,
        lessons=lessons,
        lessons_used=lesson_uses(outcome),
        unreadable_sources=dict(toolbox.unreadable),
        budget_exhausted=exhausted,
        next_steps=next_steps(top, winner, outcome, ranked),
        cost=cost,
        observations=sorted(toolbox.observations.values(), key=lambda o: o.id),
    )


def lesson_uses(outcome: Outcome) -> list[LessonUse]:
    """Each retrieved lesson, with what it changed: ranks lowered, calls made first, hypotheses kept out."""
    verified = {r.hypothesis.id for r in outcome.results}
    uses = []
    for r in outcome.retrieved:
        effects, lowered = [], []
        for h in outcome.proposed:
            notes = [n.split(": ", 1)[1] for n in h.lesson_notes if n.startswith(r.lesson.id + ":")]
            effects.extend(notes)
            if any(n.startswith("lowered") for n in notes):
                lowered.append(f"{h.component}/{h.kind}")
                if h.id not in verified:
                    effects.append(f"{h.kind} on {h.component} was not verified")
        acted = bool(effects)
        if r.component is None:
            effects.append("retrieved for review; its trigger does not show here")
        uses.append(
            LessonUse(
                lesson_id=r.lesson.id,
                relevance=r.relevance,
                acted=acted,
                effects=list(dict.fromkeys(effects)),
                lowered=list(dict.fromkeys(lowered)),
            )
        )
    return uses


def _result_for(results: list[HypothesisResult], top: Suspect | None) -> HypothesisResult | None:
    if top is None:
        return None
    return next(
        (
            r
            for r in results
            if r.hypothesis.component == top.component
            and r.hypothesis.kind == top.kind
            and r.verdict.status == top.status
        ),
        None,
    )


def _near(ts: datetime | None, onset: datetime, minutes: float = 15) -> bool:
    return ts is not None and abs((ts - onset).total_seconds()) <= minutes * 60


def _cited_components(evidence: list[Evidence], toolbox: Toolbox) -> set[str]:
    out: set[str] = set()
    for e in evidence:
        obs = toolbox.observations.get(e.observation_id)
        if obs is not None and isinstance(obs.data, MetricsData):
            out.update(s.component for s in obs.data.stats)
        elif obs is not None and "service" in obs.action.args:
            out.add(str(obs.action.args["service"]))
    return out


def timeline(incident: Incident, found: Triage, toolbox: Toolbox, evidence: list[Evidence]) -> list[TimelineEvent]:
    events = [
        TimelineEvent(ts=incident.onset, what=f"onset: {incident.title}", kind="onset"),
    ]
    if incident.alerted_at is not None:
        events.append(TimelineEvent(ts=incident.alerted_at, what="alert fired", kind="alert"))
    cited = {e.observation_id for e in evidence}
    for obs in toolbox.observations.values():
        if isinstance(obs.data, ChangesData):
            for c in obs.data.changes:
                if 0 <= c.minutes_before_onset <= 45 and (
                    obs.id in cited
                    or c.service in incident.services
                    or any(c.service == s.component for s in found.components[:3])
                ):
                    events.append(
                        TimelineEvent(
                            ts=c.ts,
                            what=f"{c.kind} {c.service}: {c.summary} [{c.id}]",
                            kind="change",
                            observation_id=obs.id,
                        )
                    )
        if isinstance(obs.data, MetricsData) and (obs.id in cited or obs.id in found.observation_ids):
            # Cited signals, and the shifts triage saw on the root cause and the alerting service.
            focus = set(incident.services) | {e_comp for e_comp in _cited_components(evidence, toolbox)}
            for s in obs.data.stats:
                if obs.id not in cited and (s.component not in focus or not _near(s.change_point, incident.onset)):
                    continue
                if s.change_point is not None and s.direction in ("up", "down"):
                    events.append(
                        TimelineEvent(
                            ts=s.change_point,
                            what=f"{s.signal} of {s.component} {s.direction}"
                            + (f" x{s.mean_ratio:.1f}" if s.mean_ratio and s.mean_ratio != float("inf") else ""),
                            kind="symptom",
                            observation_id=obs.id,
                        )
                    )
    unique = {(e.ts, e.what): e for e in events}
    return sorted(unique.values(), key=lambda e: (e.ts, e.kind))


def next_steps(
    top: Suspect | None, winner: HypothesisResult | None, outcome: Outcome, ranked: list[Suspect]
) -> list[str]:
    if top is not None and winner is not None:
        steps = [f"Confirm with the owners of {top.component}; opsagent is read-only and changed nothing."]
        if top.kind in CHANGE_KINDS:
            steps.insert(0, f"Consider rolling back the change to {top.component} cited in the evidence.")
        return steps
    look = ", ".join(f"{s.component}" for s in ranked[:3]) or "the alerting service"
    return [
        f"Look first at: {look} (highest triage scores).",
        "Check sources opsagent could not read, if any, and re-run with a larger budget.",
    ]


def load_default_playbooks(directory: Path | None = None) -> list[Playbook]:
    return load_playbooks(directory or DEFAULT_PLAYBOOKS)


async def investigate_fixture(
    path: Path,
    *,
    playbooks: Sequence[Playbook] | None = None,
    reasoner: Reasoner | None = None,
    strategy_name: str = "hybrid",
    budget: Budget | None = None,
    clock: Clock = time.perf_counter,
    lessons: Sequence[Lesson] = (),
    listener: Listener | None = None,
    now: datetime | None = None,
) -> tuple[Report, Truth | None]:
    """Replay a recorded incident. Truth is returned beside the report, never passed inward."""
    recording, truth = load(path)
    report = await investigate_recording(
        recording,
        playbooks=playbooks,
        reasoner=reasoner,
        strategy_name=strategy_name,
        budget=budget,
        clock=clock,
        lessons=lessons,
        listener=listener,
        now=now,
    )
    return report, truth


async def investigate_recording(
    recording: Recording,
    *,
    playbooks: Sequence[Playbook] | None = None,
    reasoner: Reasoner | None = None,
    strategy_name: str = "hybrid",
    budget: Budget | None = None,
    clock: Clock = time.perf_counter,
    lessons: Sequence[Lesson] = (),
    listener: Listener | None = None,
    now: datetime | None = None,
    use_signals: bool = True,
) -> Report:
    """Investigate a loaded recording with the replay sources. ``use_signals=False`` ignores the
    recording's ``signals:`` block, as a user who never wrote one would (signal discovery only)."""
    catalog = default_catalog().merged(recording.signals if use_signals else {})
    if ranking.on("discovery"):  # metric names the catalog has never seen, mapped by convention
        catalog = catalog.with_discovered(discover(recording.metrics), metric_names(recording.metrics))
    reasoner = reasoner or PlaybookReasoner(playbooks if playbooks is not None else load_default_playbooks())
    return await investigate(
        recording.alert,
        sources=replay_sources(recording, catalog),
        catalog=catalog,
        reasoner=reasoner,
        strategy_name=strategy_name,
        budget=budget,
        topology=recording.topology,
        clock=clock,
        now=now or recording.window.end,
        incident_id=recording.slug,
        recording=recording,
        lessons=lessons,
        listener=listener,
    )
