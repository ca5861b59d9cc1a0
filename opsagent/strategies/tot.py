"""``tot``: pure Tree-of-Thoughts over the hypothesis space — breadth-first, a value for every state,
a beam, and no early stop on the first confirmation: the tree is searched to its depth.

A state is a hypothesis and the evidence read for it so far; its value is the judge's running
assessment (:mod:`opsagent.strategies.value`). The root's children are ``breadth`` proposals. At
each of ``depth`` levels, every state of the beam generates ``breadth`` thoughts: its own next check,
and ``breadth - 1`` switches to another hypothesis — the best of those waiting, topped up with new
proposals — each taking its next check. All ``beam x breadth`` children are valued, and the best
``beam`` become the next level's beam; the others wait (a later level may switch back to them).
That is the ``b x d x w`` expansions of the seeds' cost model. A state that ends (confirmed,
refuted, out of checks or of its steps) is a leaf. The search ends when the tree is done: ``depth``
levels, or nothing left to expand, or the investigation's budget spent.
"""

from __future__ import annotations

from pydantic import Field

from opsagent.fixtures import Edge
from opsagent.loop import Meter
from opsagent.models import Hypothesis, Incident
from opsagent.reasoner import Reasoner
from opsagent.strategies.base import (
    Options,
    Outcome,
    Recall,
    Strategy,
    investigation_spent,
    no_lessons,
    proposal_round,
    triaged,
)
from opsagent.strategies.chains import Chain, Chains
from opsagent.strategies.value import value
from opsagent.tools import Toolbox


class TotOptions(Options):
    breadth: int | None = Field(default=None, ge=1, description="thoughts per state (default: the budget's k)")
    depth: int | None = Field(default=None, ge=1, description="levels below the root (default: max steps)")
    beam: int | None = Field(default=None, ge=1, description="states kept per level (default: the budget's beam)")


class TreeOfThoughts(Strategy):
    name = "tot"
    options_model = TotOptions

    async def run(
        self,
        incident: Incident,
        *,
        reasoner: Reasoner,
        toolbox: Toolbox,
        meter: Meter,
        topology: list[Edge],
        recall: Recall = no_lessons,
    ) -> Outcome:
        options = self.options
        assert isinstance(options, TotOptions)
        budget = meter.budget
        breadth, depth, beam = (
            options.breadth or budget.k,
            options.depth or budget.max_steps,
            options.beam or budget.beam,
        )
        found = await triaged(toolbox, incident, topology, meter)
        lessons = recall(found)
        tried: set[str] = set()
        proposed: list[Hypothesis] = []
        best = 1.0  # the root's best rank score: priors are relative to it at every level

        async with Chains(
            incident=incident,
            reasoner=reasoner,
            toolbox=toolbox,
            meter=meter,
            available=set(found.source_kinds),
            strategy=self.name,
        ) as chains:

            async def generate(k: int) -> list[Chain]:
                ranked = await proposal_round(reasoner, incident, found, meter, k=k, lessons=lessons, exclude=tried)
                tried.update(h.id for h in ranked)
                proposed.extend(ranked)
                return [await chains.open(h) for h in ranked]

            def worth(chain: Chain) -> float:
                return value(chains.verdict(chain), prior=chain.hypothesis.score / best)

            def order(states: list[Chain]) -> list[Chain]:
                return sorted(states, key=lambda c: (-worth(c), chains.opened.index(c)))

            root = await generate(breadth)
            best = max((c.hypothesis.score for c in root), default=0.0) or 1.0
            frontier = order([c for c in root if c.held])[:beam]
            level = 0
            while level < depth and frontier and not investigation_spent(meter):
                level += 1
                waiting = order([c for c in chains.open_chains() if c.held and c not in frontier])
                wanted = len(frontier) * (breadth - 1)
                switches = waiting[:wanted]
                if len(switches) < wanted:
                    switches += [c for c in await generate(wanted - len(switches)) if c.held]
                children = frontier + switches
                await chains.advance_all(children)
                frontier = order([c for c in children if c.held])[:beam]
            for chain in chains.open_chains():
                why = (
                    f"the tree is done at level {level} of {depth}"
                    if chain in frontier
                    else f"left out of the beam (value {worth(chain):.2f})"
                )
                await chains.stop(chain, why)
        return Outcome(triage=found, results=chains.results(), proposed=proposed, retrieved=lessons)
