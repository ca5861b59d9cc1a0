"""``plan``: Plan-and-Execute over a locked objective.

Up front, the plan: the proposed hypotheses in rank order, each with the check its reasoner will
make first and what it expects the checks to show. Then execution: the next check of each of the
first ``width`` hypotheses still open, one check each at a time. After every round of checks the plan's
assumptions are held against what came back, and the plan is re-made when one fails:

* a hypothesis the plan counted on was refuted (it leaves the plan; the next candidates come in);
* the evidence ranks the plan's hypotheses in another order than the plan did (the plan is re-ordered);
* a check came back unreadable (the plan goes on without counting on that source);
* a cause was proven (a rival the evidence supports is finished, what lies beneath it stays; when
  nothing does, the question is answered).

The objective never changes: it is the investigation's :class:`~opsagent.models.Incident`, frozen,
and every revision names it by the same digest. A re-plan changes hypotheses and their order,
never the question. The plan and every re-plan are in the report (``Report.plan``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from pydantic import Field

from opsagent.fixtures import Edge
from opsagent.loop import Meter
from opsagent.models import Hypothesis, HypothesisResult, Incident, PlanItem, PlanRevision
from opsagent.reasoner import Reasoner
from opsagent.strategies.base import (
    Options,
    Outcome,
    Recall,
    Strategy,
    below_proven,
    investigation_spent,
    no_lessons,
    proposal_round,
    proven,
    relative,
    triaged,
)
from opsagent.strategies.chains import Chain, Chains
from opsagent.strategies.value import value
from opsagent.tools import Toolbox
from opsagent.triage import Triage


class PlanOptions(Options):
    width: int | None = Field(default=None, ge=1, description="hypotheses checked at once (default: the beam)")
    replans: int = Field(default=8, ge=0, description="re-plans allowed; then the plan is executed as it stands")


def objective_digest(incident: Incident) -> str:
    """The locked objective, named: a digest of the whole incident (services, symptom, onset, window…)."""
    return hashlib.sha256(incident.model_dump_json().encode()).hexdigest()[:16]


class Plan:
    """The plan of one investigation: its objective, fixed at construction, and its revisions."""

    def __init__(self, objective: Incident) -> None:
        self._objective = objective
        self._digest = objective_digest(objective)
        self.revisions: list[PlanRevision] = []

    @property
    def objective(self) -> Incident:
        return self._objective

    def revise(
        self,
        objective: Incident,
        chains: Sequence[Chain],
        *,
        reason: str,
        observation_id: str | None = None,
        dropped: Sequence[str] = (),
        added: Sequence[str] = (),
    ) -> PlanRevision:
        """Record the plan as it stands now. A re-plan answers the same question or none: handing it
        another objective is a bug, refused here rather than recorded."""
        if objective_digest(objective) != self._digest:
            raise ValueError(f"the objective is locked: a re-plan may change hypotheses, not incident {objective.id}")
        revision = PlanRevision(
            index=len(self.revisions),
            reason=reason,
            observation_id=observation_id,
            objective=self._digest,
            items=[_item(c) for c in chains],
            dropped=list(dropped),
            added=list(added),
        )
        self.revisions.append(revision)
        return revision


def _item(chain: Chain) -> PlanItem:
    h = chain.hypothesis
    return PlanItem(
        hypothesis_id=h.id,
        component=h.component,
        kind=h.kind,
        next_call=chain.next_action.key() if chain.next_action is not None else None,
        steps_taken=chain.steps,
        expects=list(h.confirm_if[:2]),
    )


class PlanAndExecute(Strategy):
    name = "plan"
    options_model = PlanOptions

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
        assert isinstance(options, PlanOptions)
        width, k = options.width or meter.budget.beam, meter.budget.k
        found = await triaged(toolbox, incident, topology, meter)
        lessons = recall(found)
        plan = Plan(incident)
        tried: set[str] = set()
        proposed: list[Hypothesis] = []
        prior: dict[str, float] = {}

        async with Chains(
            incident=incident,
            reasoner=reasoner,
            toolbox=toolbox,
            meter=meter,
            available=set(found.source_kinds),
            strategy=self.name,
        ) as chains:

            async def candidates() -> list[Chain]:
                ranked = await proposal_round(reasoner, incident, found, meter, k=k, lessons=lessons, exclude=tried)
                tried.update(h.id for h in ranked)
                proposed.extend(ranked)
                scale = relative(proposed)
                prior.update({h.id: scale[h.id] for h in proposed})
                return [await chains.open(h) for h in ranked]

            def worth(chain: Chain) -> float:
                return value(chains.verdict(chain), prior=prior.get(chain.hypothesis.id, 0.0))

            order = await candidates()
            plan.revise(incident, order, reason="up front: the proposals in rank order, their first checks")
            replans = 0
            while not investigation_spent(meter):
                live = [c for c in order if not c.done]
                if not live:
                    if proven(chains.results()):
                        break
                    order = await candidates()
                    if not order:
                        break
                    reason = "every planned hypothesis ended without a cause: the next candidates"
                    plan.revise(incident, order, reason=reason, added=[c.hypothesis.id for c in order])
                    continue
                batch = live[:width]
                await chains.advance_all(batch)
                results = chains.results()
                if proven(results) and not _needed(chains, order, results, found):
                    cause = next((c for c in batch if _is_proven(c)), None)
                    reason = "the objective is answered: " + _proven_text(proven(results))
                    open_ones = [c for c in order if not c.done]
                    plan.revise(
                        incident, open_ones, reason=reason, observation_id=cause.last_observation if cause else None
                    )
                    await chains.stop_all("the objective is answered")
                    break
                surprise = _surprise(order, batch, worth, toolbox)
                if surprise is None or (replans >= options.replans and not proven(results)):
                    continue
                replans += 1
                reason, observation_id = surprise
                dropped = [f"{c.hypothesis.id}: {c.result.verdict.status}" for c in order if c.result is not None]
                kept = [c for c in order if not c.done]
                if proven(results):
                    needed = _needed(chains, order, results, found)
                    for c in kept:
                        if c not in needed:
                            await chains.stop(c, "neither supported nor beneath the proven cause")
                            dropped.append(f"{c.hypothesis.id}: neither supported nor beneath the proven cause")
                    kept = needed
                added = await candidates() if len(kept) < width and not proven(results) else []
                order = sorted(kept + added, key=lambda c: (-worth(c), (kept + added).index(c)))
                plan.revise(
                    incident,
                    order,
                    reason=reason,
                    observation_id=observation_id,
                    dropped=dropped,
                    added=[c.hypothesis.id for c in added],
                )
            await chains.stop_all("the plan ended")
        return Outcome(
            triage=found, results=chains.results(), proposed=proposed, retrieved=lessons, plan=list(plan.revisions)
        )


def _is_proven(chain: Chain) -> bool:
    return chain.result is not None and chain.result.verdict.status in ("confirmed", "probable")


def _needed(chains: Chains, order: Sequence[Chain], results: Sequence[HypothesisResult], found: Triage) -> list[Chain]:
    """Once a cause is proven, what the plan still needs: a rival explanation the evidence already
    supports (it is finished, so the report can rank proven causes by what explains what) and the
    hypotheses beneath a proven mechanism (a pool exhausted asks why)."""
    return [
        c for c in order if not c.done and (chains.verdict(c).supporting or below_proven(c.hypothesis, results, found))
    ]


def _proven_text(results: Sequence[HypothesisResult]) -> str:
    return ", ".join(f"{r.hypothesis.kind} on {r.hypothesis.component} {r.verdict.status}" for r in results)


def _surprise(
    order: Sequence[Chain], batch: Sequence[Chain], worth: Callable[[Chain], float], toolbox: Toolbox
) -> tuple[str, str | None] | None:
    """The first assumption of the plan that what just came back contradicts, and the observation."""
    for c in batch:
        r, h = c.result, c.hypothesis
        if r is not None and r.verdict.status in ("confirmed", "probable"):
            return (
                f"{h.kind} on {h.component} is {r.verdict.status}: the plan keeps the rivals the evidence "
                "supports and what lies beneath it",
                c.last_observation,
            )
        if r is not None and r.verdict.status == "refuted":
            cited = r.verdict.refuting[0].observation_id if r.verdict.refuting else c.last_observation
            return f"{h.kind} on {h.component}, which the plan counted on, was refuted: {r.verdict.reason}", cited
    for c in batch:
        seen = toolbox.observations.get(c.last_observation or "")
        if seen is not None and not seen.ok:
            return f"a check of {c.hypothesis.kind} on {c.hypothesis.component} could not be read: {seen.text}", seen.id
    live = [c for c in order if not c.done]
    for j, later in enumerate(live):
        if later not in batch:
            continue
        ahead = next((c for c in live[:j] if worth(c) < worth(later)), None)
        if ahead is not None:
            return (
                f"the evidence puts {later.hypothesis.kind} on {later.hypothesis.component} "
                f"({worth(later):.2f}) before {ahead.hypothesis.kind} on {ahead.hypothesis.component} "
                f"({worth(ahead):.2f}), which the plan ranked first",
                later.last_observation,
            )
    return None
