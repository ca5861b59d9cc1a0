"""Held verification loops (opsagent/strategies/chains.py): a search decides when each hypothesis'
loop makes its next call, the loop still enforces the budgets and the judge still decides."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import pytest

from opsagent.catalog import default_catalog
from opsagent.loop import Budget, Meter
from opsagent.models import Action, Hypothesis, Incident, Observation, SourceKind, Step, StopReason
from opsagent.reasoner import Decision, ScriptedReasoner
from opsagent.sources import Sources
from opsagent.strategies.chains import Chains
from opsagent.tools import Toolbox
from tests.fakes import FakeMetrics, incident, stats

CPU = Action(tool="metrics.signal", args={"signal": "cpu_usage", "service": "checkout"})
MEMORY = Action(tool="metrics.signal", args={"signal": "memory_usage", "service": "checkout"})


def _hypothesis(hid: str) -> Hypothesis:
    return Hypothesis(
        id=hid,
        component="checkout",
        kind="cpu_saturation",
        statement=hid,
        confirm_if=[],
        refute_if=[],
        prior=0.3,
        score=0.3,
    )


def _reads_cpu_then_memory(
    inc: Incident, h: Hypothesis, steps: Sequence[Step], observations: Mapping[str, Observation]
) -> Decision:
    plan = [CPU, MEMORY]
    return Decision(thought=f"step {len(steps) + 1}", action=plan[len(steps)] if len(steps) < len(plan) else None)


def _setup(budget: Budget | None = None) -> tuple[Chains, FakeMetrics, Meter]:
    metrics = FakeMetrics(
        {
            ("cpu_usage", "checkout"): stats("cpu_usage", "checkout", base=0.3, window=0.95, limit=1.0),
            ("memory_usage", "checkout"): stats("memory_usage", "checkout", base=100, window=110),
        }
    )
    box = Toolbox(sources=Sources(metrics=metrics), catalog=default_catalog(), incident=incident())
    meter = Meter(budget=budget or Budget())
    chains = Chains(
        incident=incident(),
        reasoner=ScriptedReasoner(script=_reads_cpu_then_memory),
        toolbox=box,
        meter=meter,
        available={SourceKind.metrics},
        strategy="test",
    )
    return chains, metrics, meter


def test_a_chain_holds_before_each_call_and_makes_one_call_when_advanced() -> None:
    async def scenario() -> None:
        chains, metrics, meter = _setup()
        async with chains:
            chain = await chains.open(_hypothesis("h1"))
            assert chain.held and chain.next_action == CPU and metrics.calls == 0 and meter.steps == 0
            await chains.advance(chain)
            assert chain.held and chain.steps == 1 and chain.next_action == MEMORY and metrics.calls == 1
            await chains.advance(chain)
            await chains.advance(chain)  # nothing left: the loop ends by itself
            assert chain.done and chain.result is not None and chain.result.stop_reason is StopReason.no_checks_left
            assert [s.action for s in chain.result.steps] == [CPU, MEMORY] and metrics.calls == 2

    asyncio.run(scenario())


def test_a_stopped_chain_ends_with_what_it_has_read_and_says_who_stopped_it() -> None:
    async def scenario() -> None:
        chains, metrics, _ = _setup()
        async with chains:
            read = await chains.open(_hypothesis("read"))
            await chains.advance(read)
            unread = await chains.open(_hypothesis("unread"))
            result = await chains.stop(read, "pruned")
            assert (
                result.stop_reason is StopReason.search
                and result.stop_detail == "stopped by test: pruned"
                and result.verdict.status == "inconclusive"
            )
            assert result.verdict.reason == "stopped by test: pruned" and len(result.steps) == 1
        # leaving the block stops what is still held; a chain stopped before any call was never verified
        assert unread.done and [r.hypothesis.id for r in chains.results()] == ["read"]
        assert metrics.calls == 1

    asyncio.run(scenario())


def test_a_call_held_past_the_budget_is_not_made_and_the_budget_is_named() -> None:
    async def scenario() -> None:
        chains, metrics, meter = _setup(Budget(token_budget=1_000))
        async with chains:
            chain = await chains.open(_hypothesis("h1"))
            meter.tokens = 1_000  # another loop spent the rest while this one was held
            await chains.advance(chain)
            assert chain.done and chain.result is not None
            assert (
                chain.result.stop_reason is StopReason.tokens
                and chain.result.stop_detail == "budget exhausted: 1000 tokens"
                and metrics.calls == 0
            )

    asyncio.run(scenario())


def test_a_reasoner_failure_reaches_the_search_instead_of_hanging_it() -> None:
    async def broken(*args: object) -> Decision:
        raise RuntimeError("the reasoner broke")

    async def scenario() -> None:
        chains, _, _ = _setup()
        chains.reasoner = ScriptedReasoner(script=broken)
        with pytest.raises(RuntimeError, match="the reasoner broke"):
            async with chains:
                await asyncio.wait_for(chains.open(_hypothesis("h1")), timeout=5)

    asyncio.run(scenario())
