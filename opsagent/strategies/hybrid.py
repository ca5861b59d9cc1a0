"""``hybrid``, the default: triage -> propose k -> rank -> verify the best b concurrently (budgeted
ReAct) -> backtrack to the next candidates while nothing is confirmed and budget lasts."""

from __future__ import annotations

import asyncio

from opsagent import ranking
from opsagent.fixtures import Edge
from opsagent.loop import Beam, Meter, verify
from opsagent.models import Hypothesis, HypothesisResult, Incident, StopReason
from opsagent.reasoner import Reasoner
from opsagent.strategies.base import (
    Outcome,
    Recall,
    Strategy,
    below_proven,
    no_lessons,
    proposal_round,
    proven,
    triaged,
)
from opsagent.tools import Toolbox


class Hybrid(Strategy):
    name = "hybrid"

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
        found = await triaged(toolbox, incident, topology, meter)
        lessons = recall(found)
        available = set(found.source_kinds)
        k, beam = meter.budget.k, meter.budget.beam
        tried: set[str] = set()
        proposed: list[Hypothesis] = []
        results: list[HypothesisResult] = []
        while not _spent(meter, results):
            queue = await proposal_round(reasoner, incident, found, meter, k=k, lessons=lessons, exclude=tried)
            if not queue:
                break
            proposed.extend(queue)
            tried.update(h.id for h in queue)
            best = max(h.score for h in queue)
            while queue and not _spent(meter, results):
                if proven(results):
                    # A proven mechanism (a pool exhausted) asks "why?": follow only what lies below it.
                    queue = [h for h in queue if below_proven(h, results, found)]
                    if not queue:
                        break
                kept = queue[:1] + [h for h in queue[1:beam] if h.score >= ranking.BEAM_FLOOR * best]
                queue = [h for h in queue if all(h.id != k.id for k in kept)]
                meter.notify(Beam(hypothesis_ids=[h.id for h in kept]))
                batch = await asyncio.gather(
                    *(
                        verify(
                            h, incident=incident, reasoner=reasoner, toolbox=toolbox, meter=meter, available=available
                        )
                        for h in kept
                    )
                )
                results.extend(batch)
            if proven(results) and not any(below_proven(h, results, found) for h in queue):
                break
        return Outcome(triage=found, results=results, proposed=proposed, retrieved=lessons)


def _spent(meter: Meter, results: list[HypothesisResult]) -> bool:
    """The investigation's budgets (tokens, wall clock) are spent; a hypothesis that used its own
    step allowance ends alone, and the next candidates still get their turn."""
    return meter.exhausted(0) is not None or any(
        r.stop_reason in (StopReason.tokens, StopReason.wall_clock) for r in results
    )
