"""The budgeted ReAct loop that verifies one hypothesis: thought -> action -> observation -> …

Budgets are enforced here, by the loop, never by a prompt: a step cap per hypothesis, a token budget
shared by the investigation (observation and reasoner text), a wall-clock cap, and the per-call
timeout the toolbox applies. After every step the judge rules; the loop stops as soon as it can.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from opsagent.judge import definitive, judge
from opsagent.models import Hypothesis, HypothesisResult, Incident, SourceKind, Step
from opsagent.reasoner import Reasoner
from opsagent.tokens import estimate_tokens
from opsagent.tools import Toolbox

log = structlog.get_logger("opsagent.loop")

Clock = Callable[[], float]
Listener = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class Budget:
    max_steps: int = 6
    token_budget: int = 40_000
    wall_s: float = 60.0
    timeout_s: float = 3.0
    k: int = 5
    beam: int = 2


@dataclass
class Meter:
    """What the investigation has spent so far. Shared by concurrent loops."""

    budget: Budget
    clock: Clock = time.perf_counter
    tokens: int = 0
    steps: int = 0
    started: float = field(default=0.0)
    listener: Listener | None = None

    def __post_init__(self) -> None:
        self.started = self.clock()

    def notify(self, event: str, **fields: Any) -> None:
        """Progress for a live view; listeners must not raise."""
        if self.listener is not None:
            self.listener(event, fields)

    def elapsed_s(self) -> float:
        return self.clock() - self.started

    def remaining_s(self) -> float:
        """What the wall-clock budget has left: the toolbox gives no call more."""
        return self.budget.wall_s - self.elapsed_s()

    def exhausted(self, steps_here: int) -> str | None:
        if steps_here >= self.budget.max_steps:
            return f"budget exhausted: {self.budget.max_steps} steps"
        if self.tokens >= self.budget.token_budget:
            return f"budget exhausted: {self.budget.token_budget} tokens"
        if self.elapsed_s() >= self.budget.wall_s:
            return f"budget exhausted: {self.budget.wall_s:g} s wall clock"
        return None


async def verify(
    hypothesis: Hypothesis,
    *,
    incident: Incident,
    reasoner: Reasoner,
    toolbox: Toolbox,
    meter: Meter,
    available: set[SourceKind],
) -> HypothesisResult:
    steps: list[Step] = []
    evidence = []
    stop: str | None = None
    meter.notify("hypothesis", id=hypothesis.id, kind=hypothesis.kind, component=hypothesis.component)
    while True:
        stop = meter.exhausted(len(steps))
        decision = await reasoner.decide(incident, hypothesis, steps, toolbox.observations, final=stop is not None)
        if steps and decision.evidence:
            steps[-1] = steps[-1].model_copy(update={"evidence": decision.evidence})
        evidence.extend(decision.evidence)
        verdict = judge(evidence, toolbox.observations, available=available)
        if definitive(verdict):
            stop = f"judge: {verdict.status}"
            break
        if stop is not None:
            break
        if decision.action is None:
            stop = "no checks left"
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
        meter.notify("step", id=hypothesis.id, thought=decision.thought, action=decision.action.key(), steps=len(steps))
    verdict = judge(evidence, toolbox.observations, available=available, stop_reason=stop)
    log.info("judge.verdict", hypothesis=hypothesis.id, status=verdict.status, incident_id=incident.id)
    meter.notify("verdict", id=hypothesis.id, status=verdict.status, reason=verdict.reason)
    return HypothesisResult(hypothesis=hypothesis, steps=steps, verdict=verdict, stop_reason=stop)
