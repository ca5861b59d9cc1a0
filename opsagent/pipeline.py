"""One investigation, end to end: alert -> incident -> strategy -> judge -> conclusion -> report.

This module runs an investigation's plan (built by :mod:`opsagent.plan`, the one place its parts are
wired) and writes the conclusion; it owns no analysis of its own. Truth never
passes through here: replay scoring reads it beside the report, after the fact.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol, runtime_checkable

import structlog

from opsagent import ranking
from opsagent.analysis.changes import changes_in_flight
from opsagent.catalog import SignalCatalog
from opsagent.correlation import explain
from opsagent.environment import EnvironmentMemory, named_as_reopened, releases_of, situation_of
from opsagent.fixtures import Recording, Truth, load
from opsagent.incident import open_incident
from opsagent.judge import explained_errors
from opsagent.lessons import Retrieved, retrieve
from opsagent.links import links_for
from opsagent.loop import Budget, Clock, Listener, Meter, Recalled, Triaged, WorkClock
from opsagent.models import (
    CHANGE_KINDS,
    Action,
    Alert,
    ChangesData,
    ChangeSuspect,
    Cost,
    Evidence,
    HypothesisResult,
    Incident,
    Lesson,
    LessonEffect,
    LessonUse,
    MetricsData,
    ModelRecord,
    Observation,
    Report,
    Suspect,
    Symptom,
    TimelineEvent,
)
from opsagent.observations import fmt, times
from opsagent.plan import InvestigationPlan, Planner, load_default_playbooks, replay_reading
from opsagent.playbooks import Playbook
from opsagent.reasoner import Reasoner
from opsagent.redaction import OBSERVATIONS_DONE, scrub_model
from opsagent.search import SearchRecorder, fan_out
from opsagent.sources import Sources
from opsagent.strategies import Outcome, reflect, strategy
from opsagent.tools import Toolbox
from opsagent.tracing import span
from opsagent.triage import Triage

log = structlog.get_logger("opsagent.pipeline")

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
        work=meter.work if meter else None,
    )
    obs = await toolbox.call(Action(tool="metrics.signal", args={"signal": signal, "service": incident.service}))
    if isinstance(obs.data, MetricsData) and obs.data.stats:
        s = obs.data.stats[0]
        earliest = alert.starts_at.timestamp() - 20 * 60
        # The alert fired once its condition had held a while (``for:``): the shift it reports is the run
        # of shifted samples reaching its start. A change point before that run began is where a noisy
        # series' mean split best, not where this shift began.
        if s.change_point is None or s.held_since is None or "up" not in (s.direction, s.brief):
            return alert.starts_at
        began = max(s.change_point, s.held_since)
        if earliest <= began.timestamp() <= alert.starts_at.timestamp():
            return began
    return alert.starts_at


@runtime_checkable
class PerInvestigation(Protocol):
    """A reasoner with state of its own per investigation (a model's transcript and spending): the
    pipeline binds it to the investigation's meter, and puts its transcript in the report."""

    def bind(self, meter: Meter, observations: Mapping[str, Observation]) -> Reasoner: ...

    def transcript(self) -> ModelRecord: ...


async def investigate(
    plan: InvestigationPlan,
    *,
    listener: Listener | None = None,
    clock: Clock = time.perf_counter,
    now: datetime | None = None,
) -> Report:
    """One investigation, as ``plan`` (:mod:`opsagent.plan`) says. ``listener`` hears its events (a
    live view); ``clock`` times it; ``now`` stamps the lessons it writes (by default a replay's
    window end, so replays are byte-identical, and the time of day live). A reading that counts
    work (a replay) counts the budget's seconds in work done, not on ``clock``, so its report does
    not depend on how busy the machine is. A plan's ``joined`` alerts (a storm
    :mod:`opsagent.correlation` joined to its alert) are named in the objective, and the report says
    which cause explains each."""
    reading = plan.reading
    alert, sources, catalog, recording = reading.alert, reading.sources, reading.catalog, reading.recording
    topology, reasoner, budget, joined = reading.topology, plan.reasoner, plan.budget, plan.joined
    strategy_name, lessons = plan.strategy, plan.lessons
    if now is None:
        now = recording.window.end if recording is not None else None
    work = WorkClock() if reading.counts_work else None
    # one trace per investigation: its triage, hypotheses, tool calls and verdicts are spans under it
    with span("opsagent.investigation", strategy=strategy_name, alertname=alert.labels.get("alertname")) as root:
        chosen = strategy(strategy_name)
        search = SearchRecorder()  # the report keeps the tree the live view draws
        meter = Meter(budget=budget, clock=clock, listener=fan_out([search, listener]), work=work)
        provisional = open_incident(
            alert,
            window=recording.window if recording else None,
            baseline=recording.baseline if recording else None,
            id=plan.incident_id,
            joined=joined,
        )
        onset = await refine_onset(alert, sources, catalog, provisional, meter=meter)
        incident = open_incident(
            alert,
            onset=onset,
            window=provisional.window,
            baseline=recording.baseline if recording else None,
            id=provisional.id,
            joined=joined,
        )
        toolbox = Toolbox(
            sources=sources,
            catalog=catalog,
            incident=incident,
            timeout_s=budget.timeout_s,
            remaining=meter.remaining_s,
            work=meter.work,
            environment=EnvironmentMemory.of(lessons, incident) if lessons else None,
        )
        log.info(
            "investigation.start",
            incident_id=incident.id,
            strategy=chosen.name,
            service=incident.service,
            reading=reading.name,
            sources=sorted(k.value for k in sources.kinds()),
            reasoner=reasoner.name,
            lessons=len(lessons),
        )
        if isinstance(reasoner, PerInvestigation):
            reasoner = reasoner.bind(meter, toolbox.observations)

        def recall(found: Triage) -> list[Retrieved]:
            # A strategy recalls lessons once its triage is done: the views hear of both here.
            meter.notify(Triaged.of(found))
            retrieved = retrieve(lessons, incident, found, top_k=plan.lessons_top_k, cap=plan.lessons_cap)
            meter.notify(Recalled.of(retrieved))
            return retrieved

        outcome = await chosen.run(
            incident, reasoner=reasoner, toolbox=toolbox, meter=meter, topology=topology or [], recall=recall
        )
        stamp = now or datetime.now(UTC)
        written = [
            lesson
            for r in outcome.results
            if (lesson := await _lesson(reasoner, incident, r, stamp, outcome, toolbox.observations))
        ]
        report = conclude(incident, outcome, toolbox, meter, strategy_name=chosen.label, lessons=written)
        report = report.model_copy(update={"search": search.tree()})
        report = report.model_copy(update={"alerts": explain(report, outcome.triage.graph or topology or [])})
        report = report.model_copy(update={"links": links_for(report, alert, plan.links)})
        if isinstance(reasoner, PerInvestigation):
            report = report.model_copy(update={"llm": reasoner.transcript()})
        # the alert's own text too: no report carries a secret (observations were redacted as they were made)
        report = scrub_model(report, done=OBSERVATIONS_DONE)
        log.info("investigation.end", incident_id=incident.id, status=report.status, steps=report.cost.steps)
        rc = report.root_cause
        root.set_attributes(
            {
                "opsagent.incident_id": incident.id,
                "opsagent.status": report.status,
                "opsagent.root_cause": f"{rc.component}/{rc.kind}" if rc is not None else "",
                "opsagent.tool_calls": report.cost.tool_calls,
                "opsagent.steps": report.cost.steps,
            }
        )
        return report


async def _lesson(
    reasoner: Reasoner,
    incident: Incident,
    result: HypothesisResult,
    now: datetime,
    outcome: Outcome,
    observations: Mapping[str, Observation],
) -> Lesson | None:
    """What a result teaches; a strategy that reflected while it searched has already asked."""
    if result.hypothesis.id in outcome.reflected:
        lesson = outcome.reflected[result.hypothesis.id]
        return lesson.model_copy(update={"created_at": now}) if lesson is not None else None
    return await reflect(reasoner, incident, result, now, observations)


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
    outcome = disciplined(outcome)
    reopened: list[LessonEffect] = []
    if toolbox.environment is not None:  # a refutation the truth overturned here before is not settled
        results, reopened = toolbox.environment.reopen(
            outcome.results,
            [c.component for c in outcome.triage.components],
            releases=releases_of(toolbox.observations.values()),
        )
        outcome = replace(outcome, results=results)
    ranked = ranking.suspects(
        outcome.proposed,
        outcome.results,
        [(c.component, c.score, c.why) for c in outcome.triage.components],
        outcome.triage.graph,
    ) or ranking.where_the_alert_points(incident.services)
    ranked = named_as_reopened(ranked, reopened)
    stopped = meter.exhausted(0) or next((r.stop_reason for r in outcome.results if r.stop_reason.budget), None)
    exhausted = meter.describe(stopped) if stopped is not None else None
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
    in_flight = ranking.order_changes(
        changes_in_flight(
            toolbox.observations.values(),
            incident=incident,
            reachable={c.component for c in outcome.triage.components if c.reachable} if outcome.triage.graph else None,
            anomaly=ranking.anomaly(
                {c.component: c.features for c in outcome.triage.components}, {e.callee for e in outcome.triage.graph}
            ),
        ),
        outcome.results,
    )
    named = named_change(top, in_flight)
    sentence = change_sentence(named) if named is not None else None
    if sentence is not None:
        statement = f"{sentence}. {statement}"
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
        lessons_used=lesson_uses(outcome)
        + (toolbox.environment.uses([*outcome.triage.learned, *reopened]) if toolbox.environment else []),
        situation=situation_of(
            incident,
            [c.component for c in outcome.triage.components],
            {c.component: c.features for c in outcome.triage.components},
            {c.component: c.evidence for c in outcome.triage.components},
            outcome.triage.learned,
            releases=releases_of(toolbox.observations.values()),
        ),
        unreadable_sources=dict(toolbox.unreadable),
        detectors=dict(outcome.triage.detectors),
        budget_exhausted=exhausted,
        next_steps=next_steps(top, winner, outcome, ranked, named=named, changes=in_flight, until=incident.window.end),
        also_proven=ranking.rivals(winner, outcome.results, outcome.triage.graph) if top and winner else [],
        change=named,
        changes=in_flight,
        cost=cost,
        observations=sorted(toolbox.observations.values(), key=lambda o: o.id),
        plan=outcome.plan,
    )


def disciplined(outcome: Outcome) -> Outcome:
    """Verdicts that the rest of the incident explains away are not proven: a latency-type verdict on a
    component whose callers' own saturation explains the slower calls, or a code-exception verdict on a
    component whose errors a network delay on it or on its callees explains, becomes inconclusive,
    saying so."""
    features = {c.component: c.features for c in outcome.triage.components}
    results = []
    for r in outcome.results:
        h, graph = r.hypothesis, outcome.triage.graph
        why = (
            ranking.explained_latency(h.kind, h.component, graph, features)
            or explained_errors(h.kind, h.component, graph, features)
            if r.verdict.status in ("confirmed", "probable")
            else None
        )
        if why is not None:
            verdict = r.verdict.model_copy(
                update={"status": "inconclusive", "reason": f"not proven: {why}", "explained": True}
            )
            r = r.model_copy(update={"verdict": verdict})
        results.append(r)
    return replace(outcome, results=results)


def lesson_uses(outcome: Outcome) -> list[LessonUse]:
    """Each retrieved lesson, with what it changed: ranks lowered, calls made first, hypotheses kept
    out, and for those kept out the refutation the lesson carries (a lesson never hides evidence)."""
    verified = {r.hypothesis.id for r in outcome.results}
    uses = []
    for r in outcome.retrieved:
        effects, lowered, held_back = [], [], []
        for h in outcome.proposed:
            notes = [n.split(": ", 1)[1] for n in h.lesson_notes if n.startswith(r.lesson.id + ":")]
            effects.extend(notes)
            if any(n.startswith("lowered") for n in notes):
                lowered.append(f"{h.component}/{h.kind}")
                if h.id not in verified:
                    effects.append(f"{h.kind} on {h.component} was not verified")
                    held_back.append(f"{h.component}/{h.kind}")
        # a lesson held back ("did not lower …": its record, or another release) changed nothing here
        acted = any(not e.startswith("did not ") for e in effects)
        if r.component is None:
            effects.append("retrieved for review; its trigger does not show here")
        uses.append(
            LessonUse(
                lesson_id=r.lesson.id,
                relevance=r.relevance,
                acted=acted,
                effects=list(dict.fromkeys(effects)),
                lowered=list(dict.fromkeys(lowered)),
                held_back=list(dict.fromkeys(held_back)),
                refuted_kind=r.lesson.refuted_kind,
                source_incident=r.lesson.source_incident,
                refutation=list(r.lesson.refuting_evidence),
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
        TimelineEvent(ts=incident.onset, what=incident.title, kind="onset"),
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
                    events.extend(
                        TimelineEvent(
                            ts=step.ts,
                            what=f"step {n} of {c.kind} {c.service} [{step.id or c.id}]"
                            + (f": {step.weight:g} % on {c.to_version}" if step.weight is not None else ""),
                            kind="change",
                            observation_id=obs.id,
                        )
                        for n, step in enumerate(c.steps, start=1)
                        if step.ts <= incident.window.end
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
                            + (f" {times(s.mean_ratio)}" if s.mean_ratio is not None else ""),
                            kind="symptom",
                            observation_id=obs.id,
                        )
                    )
    unique = {(e.ts, e.what): e for e in events}
    return sorted(unique.values(), key=lambda e: (e.ts, e.kind))


def named_change(top: Suspect | None, changes: list[ChangeSuspect]) -> ChangeSuspect | None:
    """The change a verdict names: the likeliest change to the root cause, when a change caused it."""
    if top is None or top.kind not in CHANGE_KINDS:
        return None
    return next((c for c in changes if c.service == top.component and c.status in ("confirmed", "probable")), None)


def change_sentence(c: ChangeSuspect) -> str | None:
    """The change in one sentence: what its new version's pods do that its old version's do not,
    since which step, and its id; None for a change with no versions to tell apart (a config push,
    a flag), whose evidence already says what it changed."""
    old, new = c.from_version or "the old version", c.to_version or "the new version"
    cmp = c.comparison
    if c.verdict == "worse" and cmp is not None:
        calls = f" of calls from {cmp.caller}" if cmp.caller and cmp.caller != c.service else ""
        p = f"p={cmp.p_value:.2g}, " if cmp.p_value is not None else ""
        figure = (
            f"{c.service} {new} pods: {cmp.metric}{calls} {fmt(cmp.new_median, cmp.unit)}, {old} pods "
            f"{fmt(cmp.old_median, cmp.unit)} ({p}{cmp.new_samples}/{cmp.old_samples} one-minute samples)"
        )
    elif c.verdict == "unseen":
        figure = f"{c.service} {new} pods report nothing while its {old} pods serve"
    elif c.from_version or c.to_version:
        figure = f"{c.kind} of {c.service} {old} -> {new}"
    else:
        return None
    if c.step is None or c.step_at is None:
        when = "(it moved only after onset)"
    elif c.step == 0:
        when = f"since its {c.kind} began at {c.step_at:%H:%M}"
    else:
        when = f"since step {c.step} of its {c.kind} at {c.step_at:%H:%M}"
    return f"{figure}, {when} [{c.id}]"


def next_steps(
    top: Suspect | None,
    winner: HypothesisResult | None,
    outcome: Outcome,
    ranked: list[Suspect],
    *,
    named: ChangeSuspect | None = None,
    changes: Sequence[ChangeSuspect] = (),
    until: datetime | None = None,
) -> list[str]:
    """What to do next. opsagent never acts: a change it names is to be rolled back by its owners
    (paused first while it is still rolling out: ``until`` is when the telemetry ends)."""
    if top is not None and winner is not None:
        steps = [f"Confirm with the owners of {top.component}; opsagent is read-only and changed nothing."]
        if named is not None:
            back = f" ({named.service} {named.to_version} -> {named.from_version})" if named.from_version else ""
            steps.insert(0, f"Roll back {named.id}{back}.")
            rolling = named.kind == "rollout" or len(named.ids) > 1  # a change that moves in steps
            if rolling and (named.ended is None or (until is not None and named.ended > until)):
                steps.insert(1, f"Pause {named.id} first, so that its next step takes no more pods or traffic.")
        elif top.kind in CHANGE_KINDS:
            steps.insert(0, f"Consider rolling back the change to {top.component} cited in the evidence.")
        return steps
    look = ", ".join(f"{s.component}" for s in ranked[:3]) or "the alerting service"
    out = [f"Look first at: {look} (highest triage scores)."]
    likely = [c for c in changes[:3] if c.score > 0]
    if likely:
        out.append("Changes to look at first: " + ", ".join(f"{c.id} ({c.service}, {c.verdict})" for c in likely) + ".")
    out.append("Check sources opsagent could not read, if any, and re-run with a larger budget.")
    return out


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
    """Replay a recorded incident with the shipped choices (or the ones given). Truth is returned
    beside the report, never passed inward."""
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
    """Replay a loaded recording, planned as :class:`opsagent.plan.Planner` plans every replay, with
    the shipped playbooks unless others are given. ``use_signals=False`` ignores the recording's
    ``signals:`` block, as a user who never wrote one would (signal discovery only)."""
    planner = Planner(
        playbooks=tuple(playbooks if playbooks is not None else load_default_playbooks()),
        strategy=strategy_name,
        budget=budget or Budget(),
    )
    plan = planner.plan(replay_reading(recording, use_signals=use_signals), reasoner=reasoner, lessons=lessons)
    return await investigate(plan, listener=listener, clock=clock, now=now)
