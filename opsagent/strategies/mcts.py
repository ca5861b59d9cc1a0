"""``mcts``: LATS-style Monte Carlo tree search over hypotheses and their next checks.

Each iteration: **selection** walks down from the root by UCT (mean value plus an exploration bonus
``c * sqrt(ln N / n)``; a child never visited comes first, the likelier first); **expansion** opens the
selected hypothesis' loop (the reasoner chooses its next check, a new node); **simulation** lets that
loop make ``rollout`` more checks; **evaluation** is the judge's evidence score of the state reached
(:mod:`opsagent.strategies.value`); **backpropagation** adds it to every node on the path. A
rollout that ends its hypothesis without a cause (refuted, out of checks or steps) is a failed
rollout: the reasoner **reflects** on it, and the lesson steers the rest of this investigation —
every hypothesis not yet tried is re-ranked with it (lower where the refuted kind's trigger shows
again, its next action first), and the reasoner proposes a replacement with it in mind.

The search ends on a proven cause nothing still open could lie beneath, when ``iterations`` are
spent, when no node is left to select, or when the investigation's budget is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import Field

from opsagent.fixtures import Edge
from opsagent.lessons import Retrieved, relevance, trigger_present
from opsagent.loop import Meter
from opsagent.models import Hypothesis, Incident, Lesson
from opsagent.reasoner import Reasoner
from opsagent.strategies.base import (
    Options,
    Outcome,
    Recall,
    Strategy,
    investigation_spent,
    no_lessons,
    proposal_round,
    reflect,
    settled,
    triaged,
)
from opsagent.strategies.chains import Chain, Chains
from opsagent.strategies.value import value
from opsagent.tools import Toolbox
from opsagent.triage import Triage


class MctsOptions(Options):
    iterations: int = Field(default=16, ge=1, description="rollouts (selection, expansion, simulation, backup)")
    exploration: float = Field(default=1.0, ge=0, description="UCT's exploration constant c")
    rollout: int = Field(default=2, ge=1, description="checks a rollout makes")


@dataclass(eq=False)
class Node:
    """A node of the search tree: a hypothesis (a child of the root), or a check made for it."""

    label: str
    prior: float = 0.0
    visits: int = 0
    total: float = 0.0
    terminal: bool = False
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)

    def add(self, child: Node) -> Node:
        child.parent = self
        self.children.append(child)
        return child

    @property
    def mean(self) -> float:
        return self.total / self.visits if self.visits else 0.0


def uct(node: Node, *, exploration: float) -> float:
    """Upper confidence bound for trees: infinite for a node never visited."""
    if node.visits == 0:
        return math.inf
    parent = node.parent.visits if node.parent is not None else node.visits
    return node.mean + exploration * math.sqrt(math.log(max(parent, 1)) / node.visits)


def select(root: Node, *, exploration: float) -> list[Node]:
    """The path from the root that UCT chooses, down to a leaf; ties go to the likelier, then the
    earlier child. Terminal nodes are never chosen; an empty path past the root means none is left."""
    path = [root]
    node = root
    while node.children:
        options = [c for c in node.children if not c.terminal]
        if not options:
            break
        node = max(options, key=lambda c: (uct(c, exploration=exploration), c.prior, -node.children.index(c)))
        path.append(node)
    return path


def backpropagate(path: Sequence[Node], reward: float) -> None:
    for node in path:
        node.visits += 1
        node.total += reward


def applying(lessons: Sequence[Lesson], incident: Incident, found: Triage) -> list[Retrieved]:
    """This investigation's own lessons, wherever their trigger shows (not only where they were learned)."""
    return [
        Retrieved(lesson=lesson, relevance=relevance(lesson, incident, profile), component=profile.component)
        for lesson in lessons
        for profile in found.components
        if trigger_present(lesson, profile)
    ]


class LanguageAgentTreeSearch(Strategy):
    name = "mcts"
    options_model = MctsOptions

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
        assert isinstance(options, MctsOptions)
        found = await triaged(toolbox, incident, topology, meter)
        stored = recall(found)
        learned: list[Lesson] = []
        reflected: dict[str, Lesson | None] = {}
        tried: set[str] = set()
        order: list[str] = []  # hypothesis ids, as proposed
        proposals: dict[str, Hypothesis] = {}  # as proposed, before this investigation's own lessons
        latest: dict[str, Hypothesis] = {}  # as last ranked with them
        root = Node("root")
        heads: dict[str, Node] = {}
        best = 1.0  # the first proposals' best rank score: priors are relative to it

        def lessons() -> list[Retrieved]:
            return [*stored, *applying(learned, incident, found)]

        async with Chains(
            incident=incident,
            reasoner=reasoner,
            toolbox=toolbox,
            meter=meter,
            available=set(found.source_kinds),
            strategy=self.name,
        ) as chains:
            opened: dict[str, Chain] = {}

            def reward(hid: str) -> float:
                return value(chains.verdict(opened[hid]), prior=heads[hid].prior)

            async def simulate(path: list[Node], checks: int) -> None:
                """Up to ``checks`` more calls of the hypothesis at ``path[1]``, each a new node; then
                the state's value is backed up the path."""
                chain = opened[path[1].label]
                for _ in range(checks):
                    if not chain.held or chain.next_action is None:
                        break
                    path.append(path[-1].add(Node(chain.next_action.key())))
                    await chains.advance(chain)
                backpropagate(path, reward(path[1].label))
                path[1].terminal = chain.done

            async def expand(n: int) -> list[str]:
                """The reasoner proposes ``n`` hypotheses, with what this search has learned; each becomes a
                child of the root and is evaluated on its first check."""
                nonlocal best
                ranked = await proposal_round(reasoner, incident, found, meter, k=n, lessons=lessons(), exclude=tried)
                if not heads:
                    best = max((h.score for h in ranked), default=0.0) or 1.0
                for h in ranked:
                    tried.add(h.id)
                    order.append(h.id)
                    proposals[h.id] = latest[h.id] = h
                    heads[h.id] = root.add(Node(h.id, prior=h.score / best))
                    opened[h.id] = await chains.open(h)
                for h in ranked:
                    await simulate([root, heads[h.id]], 1)
                return [h.id for h in ranked]

            def rerank() -> None:
                """A lesson re-ranks every open hypothesis from its proposal (so it lowers one once, however
                often it is re-ranked): what it lowers is worth less in every later rollout."""
                still = [proposals[hid] for hid in order if not opened[hid].done]
                for h in reasoner.rank(incident, still, found, lessons()) if still else []:
                    # its loop has started: only the lowering acts on it now, not a first call
                    lowered = [n for n in h.lesson_notes if ": lowered " in n and n not in proposals[h.id].lesson_notes]
                    latest[h.id] = proposals[h.id].model_copy(
                        update={"score": h.score, "lesson_notes": [*proposals[h.id].lesson_notes, *lowered]}
                    )
                    heads[h.id].prior = h.score / best

            async def conclude_rollout(hid: str) -> bool:
                """After a hypothesis' loop ended: True when the search is done."""
                result = opened[hid].result
                assert result is not None
                if result.verdict.status in ("confirmed", "probable"):
                    # a rival the evidence supports is finished, so the report ranks proven causes by what
                    # explains what; the search ends unless something open lies beneath the cause
                    for other in chains.open_chains():
                        if chains.verdict(other).supporting:
                            await chains.run_out(other)
                            heads[other.hypothesis.id].terminal = True
                    still = [opened[h].hypothesis for h in order if not opened[h].done]
                    return settled(chains.results(), still, found)
                # a failed rollout: the reasoner reflects, and the lesson steers the rest of the search
                lesson = await reflect(reasoner, incident, result, incident.window.end, toolbox.observations)
                reflected[hid] = lesson
                if lesson is not None and all(lesson.id != le.id for le in learned):
                    learned.append(lesson)
                    rerank()
                for new in await expand(1):  # a replacement, proposed in the light of it
                    if opened[new].done and await conclude_rollout(new):
                        return True
                return False

            done = False
            for hid in await expand(meter.budget.k):
                if opened[hid].done and not done:
                    done = await conclude_rollout(hid)
            for _ in range(options.iterations):
                if done or investigation_spent(meter):
                    break
                path = select(root, exploration=options.exploration)  # selection
                if len(path) == 1:
                    break
                await simulate(path, options.rollout)  # simulation, evaluation, backpropagation
                if opened[path[1].label].done:
                    done = await conclude_rollout(path[1].label)
            await chains.stop_all("the search ended")
        used = [latest[h] for h in order]
        retrieved = list({r.lesson.id: r for r in lessons()}.values())  # the report lists a lesson once
        return Outcome(triage=found, results=chains.results(), proposed=used, retrieved=retrieved, reflected=reflected)
