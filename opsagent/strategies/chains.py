"""Verification loops a search can hold: each hypothesis's budgeted ReAct loop, paused before every
tool call until the search lets it make the call, or stops it.

The loop is :func:`opsagent.loop.verify`, unchanged: it enforces the budgets (steps per hypothesis,
the investigation's tokens and wall clock), asks the judge after every step and stops as soon as it
can. What a search adds is *when* each loop takes its next step — ``tot`` a level of states at a
time, ``plan`` in the plan's order, ``mcts`` one rollout for the hypothesis UCT selects — and *which*
loops go on. The pause sits at the one seam the loop has: the reasoner's decision about the next call.
A held loop has read everything it has observed (its evidence is in), and its next call is known.

One reasoner decision per turn means one next call per hypothesis: a search here branches over
hypotheses, and within one hypothesis follows the reasoner's choice. (A model's conversation cannot be
forked into two next calls without writing turns it never said.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType

from opsagent.judge import definitive, judge
from opsagent.lessons import Retrieved
from opsagent.loop import Meter, verify
from opsagent.models import (
    Action,
    Evidence,
    Hypothesis,
    HypothesisResult,
    Incident,
    Lesson,
    Observation,
    SourceKind,
    Step,
    StopReason,
    Verdict,
)
from opsagent.reasoner import Decision, Reasoner
from opsagent.tools import Toolbox
from opsagent.triage import Triage


@dataclass(eq=False)
class Chain:
    """One hypothesis's loop as a search sees it: what it has read, what it will call next, how it ended."""

    hypothesis: Hypothesis
    evidence: list[Evidence] = field(default_factory=list)
    steps: int = 0
    next_action: Action | None = None
    last_observation: str | None = None  # the id of what its latest call returned
    result: HypothesisResult | None = None
    stopped: bool = False  # the search stopped it (it did not end by itself)
    _go: asyncio.Future[str | None] | None = None
    _settled: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[HypothesisResult] | None = None

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def held(self) -> bool:
        return self._go is not None and not self._go.done()


class _Held:
    """The reasoner a held loop asks: the real one decides, then the loop waits for the search."""

    def __init__(self, inner: Reasoner, chain: Chain, chains: Chains) -> None:
        self.inner, self.chain, self.chains = inner, chain, chains
        self.name = inner.name

    def propose(
        self, incident: Incident, triage: Triage, *, k: int, lessons: Sequence[Retrieved], exclude: set[str]
    ) -> list[Hypothesis]:
        return self.inner.propose(incident, triage, k=k, lessons=lessons, exclude=exclude)

    def rank(
        self, incident: Incident, candidates: list[Hypothesis], triage: Triage, lessons: Sequence[Retrieved]
    ) -> list[Hypothesis]:
        return self.inner.rank(incident, candidates, triage, lessons)

    def reflect(
        self, incident: Incident, result: HypothesisResult, now: datetime, observations: Mapping[str, Observation]
    ) -> Lesson | None:
        return self.inner.reflect(incident, result, now, observations)

    async def decide(
        self,
        incident: Incident,
        hypothesis: Hypothesis,
        steps: Sequence[Step],
        observations: Mapping[str, Observation],
        *,
        final: bool,
    ) -> Decision:
        decision = await self.inner.decide(incident, hypothesis, steps, observations, final=final)
        chain = self.chain
        chain.evidence.extend(decision.evidence)
        chain.steps = len(steps)
        chain.last_observation = steps[-1].observation_id if steps else None
        ends = final or decision.action is None or definitive(self.chains.verdict(chain))
        if ends:  # the loop stops by itself after this answer
            chain.next_action = None
            return decision
        chain.next_action = decision.action
        chain._go = asyncio.get_running_loop().create_future()
        chain._settled.set()
        why = await chain._go
        if why is None:
            return decision
        chain.next_action = None
        return Decision(thought=f"stopped by the search: {why}", action=None, evidence=decision.evidence)


class Chains:
    """The held loops of one investigation. Use as ``async with Chains(...) as chains:``; whatever is
    still held on the way out is stopped, so no loop outlives its investigation."""

    def __init__(
        self,
        *,
        incident: Incident,
        reasoner: Reasoner,
        toolbox: Toolbox,
        meter: Meter,
        available: set[SourceKind],
        strategy: str,
    ) -> None:
        self.incident, self.reasoner, self.toolbox, self.meter = incident, reasoner, toolbox, meter
        self.available, self.strategy = available, strategy
        self.opened: list[Chain] = []

    async def __aenter__(self) -> Chains:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            await self.stop_all("the search ended")
            return
        for chain in self.opened:
            if chain._task is not None and not chain._task.done():
                chain._task.cancel()

    def verdict(self, chain: Chain) -> Verdict:
        """The judge's running assessment of what the chain has read so far."""
        return judge(chain.evidence, self.toolbox.observations, available=self.available, hypothesis=chain.hypothesis)

    async def open(self, hypothesis: Hypothesis) -> Chain:
        """Start verifying ``hypothesis``; returns once its loop holds before its first call (or ended)."""
        chain = Chain(hypothesis)
        self.opened.append(chain)
        held = _Held(self.reasoner, chain, self)
        chain._task = asyncio.ensure_future(
            verify(
                hypothesis,
                incident=self.incident,
                reasoner=held,
                toolbox=self.toolbox,
                meter=self.meter,
                available=self.available,
            )
        )
        chain._task.add_done_callback(lambda task: self._ended(chain, task))
        await self._wait(chain)
        return chain

    async def advance(self, chain: Chain) -> Chain:
        """Let the chain make its next call; returns once it holds again or has ended. The loop checked
        the budget before it decided on the call; a call held past the investigation's budget is not
        made (the chain ends, the budget named), as the loop would not have made it then."""
        if chain.done:
            return chain
        spent = self.meter.exhausted(0)
        if spent is not None:
            await self._end(chain, self.meter.describe(spent), self.meter.describe(spent), reason=spent)
            return chain
        self._release(chain, None)
        await self._wait(chain)
        return chain

    async def advance_all(self, chains: Sequence[Chain]) -> None:
        """Several chains one step each, at most the budget's beam of them at once (as hybrid verifies
        its beam), so a spent budget stops the rest of them: calls in flight overrun it by at most that."""
        width = max(self.meter.budget.beam, 1)
        for i in range(0, len(chains), width):
            await asyncio.gather(*(self.advance(c) for c in chains[i : i + width]))

    async def run_out(self, chain: Chain) -> HypothesisResult:
        """Let the chain run to its own end."""
        while not chain.done:
            await self.advance(chain)
        assert chain.result is not None
        return chain.result

    async def stop(self, chain: Chain, why: str) -> HypothesisResult:
        """Stop the chain where it is; its verdict is the judge's on what it has read, and its stop
        reason says the search stopped it and why."""
        if not chain.done:
            await self._end(chain, why, f"stopped by {self.strategy}: {why}")
        assert chain.result is not None
        return chain.result

    async def _end(self, chain: Chain, why: str, stop: str, reason: StopReason = StopReason.search) -> None:
        self._release(chain, why)
        await self._wait(chain)
        assert chain.result is not None
        verdict = chain.result.verdict
        if verdict.status == "inconclusive":
            verdict = verdict.model_copy(update={"reason": stop})
        chain.result = chain.result.model_copy(update={"stop_reason": reason, "stop_detail": stop, "verdict": verdict})
        chain.stopped = True

    async def stop_all(self, why: str) -> None:
        for chain in self.opened:
            if chain.held:
                await self.stop(chain, why)

    def results(self) -> list[HypothesisResult]:
        """The result of every chain that was verified, in the order they were opened: a chain the
        search stopped before its first call was never verified (it stays a proposal, unverified)."""
        return [c.result for c in self.opened if c.result is not None and not (c.stopped and c.steps == 0)]

    def open_chains(self) -> list[Chain]:
        return [c for c in self.opened if not c.done]

    # ------------------------------------------------------------ the hand-over

    @staticmethod
    def _release(chain: Chain, why: str | None) -> None:
        if chain._go is None or chain._go.done():
            raise RuntimeError(f"{chain.hypothesis.id} is not held")
        chain._settled.clear()
        chain._go.set_result(why)

    @staticmethod
    def _ended(chain: Chain, task: asyncio.Task[HypothesisResult]) -> None:
        if not task.cancelled() and task.exception() is None:
            chain.result = task.result()
        chain.next_action = None
        chain._settled.set()

    @staticmethod
    async def _wait(chain: Chain) -> None:
        await chain._settled.wait()
        task = chain._task
        if task is not None and task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]  # a reasoner's bug is the investigation's
