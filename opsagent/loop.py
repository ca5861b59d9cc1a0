"""The budgeted ReAct loop that verifies one hypothesis: thought -> action -> observation -> …

Budgets are enforced here, by the loop, never by a prompt: a step cap per hypothesis, a token budget
shared by the investigation (observation and reasoner text), a wall-clock cap, and the per-call
timeout the toolbox applies. After every step the judge rules; the loop stops as soon as it can.

The loop is a stream (:func:`react`): it yields each :class:`StepTaken` once the reasoner has read
its observation, then one :class:`Concluded` with the verdict and a :class:`StopReason`. The
investigation reports what it does as typed :data:`Event` objects to a listener; the views (the live
tree, the report's search tree) consume them. Nothing here draws anything.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Literal

import structlog
from pydantic import Field

from opsagent.judge import definitive, judge
from opsagent.models import (
    Evidence,
    Frozen,
    Hypothesis,
    HypothesisResult,
    Incident,
    RankedComponent,
    RecalledLesson,
    SourceKind,
    Step,
    StopReason,
    Verdict,
)
from opsagent.reasoner import Reasoner
from opsagent.tokens import estimate_tokens
from opsagent.tools import Toolbox
from opsagent.tracing import span

if TYPE_CHECKING:
    from opsagent.lessons import Retrieved
    from opsagent.triage import Triage

log = structlog.get_logger("opsagent.loop")

Clock = Callable[[], float]


# ---------------------------------------------------------------- what an investigation reports


class Triaged(Frozen):
    """Triage is done: the components it ranked, from the sources it could read."""

    event: Literal["triaged"] = "triaged"
    components: list[RankedComponent]
    sources: list[SourceKind]

    @classmethod
    def of(cls, found: Triage, *, top: int = 5) -> Triaged:
        ranked = [
            RankedComponent(component=c.component, score=c.score, why="; ".join(c.why)) for c in found.components[:top]
        ]
        return cls(components=ranked, sources=list(found.source_kinds))


class Recalled(Frozen):
    """The stored lessons retrieved for this investigation."""

    event: Literal["recalled"] = "recalled"
    lessons: list[RecalledLesson]

    @classmethod
    def of(cls, retrieved: list[Retrieved]) -> Recalled:
        return cls(
            lessons=[
                RecalledLesson(
                    lesson_id=r.lesson.id,
                    refuted_kind=r.lesson.refuted_kind,
                    component=r.component,
                    relevance=r.relevance,
                )
                for r in retrieved
            ]
        )


class Proposed(Frozen):
    """A round of candidates, ranked, in the order the strategy takes them (lessons' notes included)."""

    event: Literal["proposed"] = "proposed"
    hypotheses: list[Hypothesis]


class Beam(Frozen):
    """The hypotheses a strategy verifies next, at once."""

    event: Literal["beam"] = "beam"
    hypothesis_ids: list[str]


class Started(Frozen):
    """A hypothesis entered the beam: its loop starts."""

    event: Literal["started"] = "started"
    hypothesis: Hypothesis


class StepTaken(Frozen):
    """One turn of a hypothesis's loop, with the evidence the reasoner read in its observation."""

    event: Literal["step"] = "step"
    hypothesis_id: str
    step: Step


class Concluded(Frozen):
    """A hypothesis's loop stopped, and the judge's verdict on it."""

    event: Literal["verdict"] = "verdict"
    hypothesis_id: str
    verdict: Verdict
    stop_reason: StopReason
    stop_detail: str


Event = Annotated[Triaged | Recalled | Proposed | Beam | Started | StepTaken | Concluded, Field(discriminator="event")]
Listener = Callable[[Event], None]


# ---------------------------------------------------------------- budgets


@dataclass(frozen=True)
class Budget:
    max_steps: int = 6
    token_budget: int = 40_000
    wall_s: float = 60.0
    timeout_s: float = 3.0
    k: int = 5
    beam: int = 2


#: What one tool call counts as against the wall-clock budget in a replay: the budget's 60 s are
#: 120 calls, past what any recorded incident takes (the most is ~40), so the budget stops only a
#: search that runs away, and at the same call however slow the machine is.
SIMULATED_CALL_S = 0.5


@dataclass
class WorkClock:
    """A replay's clock for its budgets: the work done (tool calls, each :data:`SIMULATED_CALL_S`),
    never the machine's time, so a replay used as a test gives the same report on a busy machine.
    Live investigations keep the wall clock: there, an upstream's slowness is the incident's."""

    per_call_s: float = SIMULATED_CALL_S
    calls: int = 0

    def __call__(self) -> float:
        return self.calls * self.per_call_s

    def charge(self) -> None:
        self.calls += 1


@dataclass
class Meter:
    """What the investigation has spent so far. Shared by concurrent loops. ``clock`` measures the
    time the report states; the budget's seconds are counted by ``work`` where one is given (replay)."""

    budget: Budget
    clock: Clock = time.perf_counter
    tokens: int = 0
    steps: int = 0
    started: float = field(default=0.0)
    listener: Listener | None = None
    work: WorkClock | None = None

    def __post_init__(self) -> None:
        self.started = self.clock()

    def notify(self, event: Event) -> None:
        """Progress for the views; listeners must not raise."""
        if self.listener is not None:
            self.listener(event)

    def elapsed_s(self) -> float:
        return self.clock() - self.started

    def spent_s(self) -> float:
        """Seconds spent against the budget: the work done in a replay, the wall clock live."""
        return self.work() if self.work is not None else self.elapsed_s()

    def remaining_s(self) -> float:
        """What the wall-clock budget has left: the toolbox gives no call more."""
        return self.budget.wall_s - self.spent_s()

    def exhausted(self, steps_here: int) -> StopReason | None:
        if steps_here >= self.budget.max_steps:
            return StopReason.steps
        if self.tokens >= self.budget.token_budget:
            return StopReason.tokens
        if self.spent_s() >= self.budget.wall_s:
            return StopReason.wall_clock
        return None

    def describe(self, reason: StopReason) -> str:
        """The stop reason in words, with the budget's figure."""
        return {
            StopReason.steps: f"budget exhausted: {self.budget.max_steps} steps",
            StopReason.tokens: f"budget exhausted: {self.budget.token_budget} tokens",
            StopReason.wall_clock: f"budget exhausted: {self.budget.wall_s:g} s wall clock"
            + (f" (replay: {self.work.per_call_s:g} s a tool call)" if self.work is not None else ""),
            StopReason.no_checks_left: "no checks left",
            StopReason.confirmed: "judge: confirmed",
            StopReason.refuted: "judge: refuted",
        }[reason]


# ---------------------------------------------------------------- the loop


async def react(
    hypothesis: Hypothesis,
    *,
    incident: Incident,
    reasoner: Reasoner,
    toolbox: Toolbox,
    meter: Meter,
    available: set[SourceKind],
) -> AsyncIterator[StepTaken | Concluded]:
    """Verify one hypothesis as a stream: each step once its evidence is read, then the verdict."""
    steps: list[Step] = []
    evidence: list[Evidence] = []
    while True:
        stop = meter.exhausted(len(steps))
        decision = await reasoner.decide(incident, hypothesis, steps, toolbox.observations, final=stop is not None)
        if steps:  # what the reasoner read in the last observation completes that step
            if decision.evidence:
                steps[-1] = steps[-1].model_copy(update={"evidence": decision.evidence})
            yield StepTaken(hypothesis_id=hypothesis.id, step=steps[-1])
        evidence.extend(decision.evidence)
        verdict = judge(evidence, toolbox.observations, available=available, hypothesis=hypothesis)
        if definitive(verdict):
            stop = StopReason(verdict.status)
            break
        if stop is not None:
            break
        if decision.action is None:
            stop = StopReason.no_checks_left
            break
        observation = await toolbox.call(decision.action)
        tokens = observation.tokens + estimate_tokens(decision.thought)
        meter.tokens += tokens
        meter.steps += 1
        steps.append(
            Step(
                index=len(steps) + 1,
                thought=decision.thought,
                action=decision.action,
                observation_id=observation.id,
                tokens=tokens,
            )
        )
        log.debug("verify.step", hypothesis=hypothesis.id, tool=decision.action.tool, obs=observation.id)
    detail = meter.describe(stop)
    with span("opsagent.judge", hypothesis=hypothesis.id, evidence=len(evidence)) as traced:
        verdict = judge(evidence, toolbox.observations, available=available, stop_reason=detail, hypothesis=hypothesis)
        traced.set_attribute("opsagent.verdict", verdict.status)
    log.info("judge.verdict", hypothesis=hypothesis.id, status=verdict.status, incident_id=incident.id)
    yield Concluded(hypothesis_id=hypothesis.id, verdict=verdict, stop_reason=stop, stop_detail=detail)


async def verify(
    hypothesis: Hypothesis,
    *,
    incident: Incident,
    reasoner: Reasoner,
    toolbox: Toolbox,
    meter: Meter,
    available: set[SourceKind],
) -> HypothesisResult:
    """Run :func:`react` to its verdict, reporting every event to the meter's listener."""
    meter.notify(Started(hypothesis=hypothesis))
    steps: list[Step] = []
    stream = react(hypothesis, incident=incident, reasoner=reasoner, toolbox=toolbox, meter=meter, available=available)
    with span(
        "opsagent.hypothesis", hypothesis=hypothesis.id, component=hypothesis.component, kind=hypothesis.kind
    ) as traced:
        async for event in stream:
            meter.notify(event)
            if isinstance(event, StepTaken):
                steps.append(event.step)
                continue
            traced.set_attributes(
                {
                    "opsagent.verdict": event.verdict.status,
                    "opsagent.stop_reason": event.stop_reason.value,
                    "opsagent.steps": len(steps),
                }
            )
            return HypothesisResult(
                hypothesis=hypothesis,
                steps=steps,
                verdict=event.verdict,
                stop_reason=event.stop_reason,
                stop_detail=event.stop_detail,
            )
    raise RuntimeError(f"the loop verifying {hypothesis.id} ended without a verdict")
