"""``reflexion``: ``react``, tried again up to K times, each attempt starting from the lessons of the
attempts before it.

An attempt that proves a cause ends the investigation. One that does not is reflected on: each of
its refuted hypotheses becomes a lesson (the reasoner's, checked concrete like every lesson), and
the next attempt retrieves those lessons with the stored ones — it looks first where the lesson
says, and does not chase again what the lesson ruled out where its trigger shows, nor anything an
earlier attempt verified (its verdict stands). An attempt that taught nothing new ends the retries:
the engine is deterministic, so it would repeat itself. The attempts share the investigation's
budget and its tool cache (a call made twice is made once).

Unlike ``benchmarks/lessons_bench.py``'s retries, which learn from the recorded truth between
replays, the evaluator here is the judge alone: an investigation never sees the truth.
"""

from __future__ import annotations

from pydantic import Field

from opsagent.fixtures import Edge
from opsagent.lessons import Retrieved, retrieve
from opsagent.loop import Meter
from opsagent.models import Hypothesis, HypothesisResult, Incident, Lesson
from opsagent.reasoner import Reasoner
from opsagent.strategies.base import (
    Options,
    Outcome,
    Recall,
    Strategy,
    investigation_spent,
    no_lessons,
    proven,
    reflect,
    stopped_by_budget,
)
from opsagent.strategies.react import GreedyReact
from opsagent.tools import Toolbox
from opsagent.triage import Triage


class ReflexionOptions(Options):
    attempts: int = Field(default=3, ge=1, description="react attempts at most (K)")


class Reflexion(Strategy):
    name = "reflexion"
    options_model = ReflexionOptions

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
        assert isinstance(options, ReflexionOptions)
        learned: list[Lesson] = []
        reflected: dict[str, Lesson | None] = {}
        results: list[HypothesisResult] = []
        proposed: list[Hypothesis] = []
        retrieved: dict[str, Retrieved] = {}
        outcome: Outcome | None = None

        def with_learned(found: Triage) -> list[Retrieved]:
            own = retrieve(learned, incident, found, top_k=len(learned), cap=len(learned))
            chosen = [*recall(found), *(r for r in own if r.lesson.id not in {s.lesson.id for s in retrieved.values()})]
            retrieved.update({r.lesson.id: r for r in chosen if r.lesson.id not in retrieved})
            return chosen

        for _attempt in range(options.attempts):
            attempt = GreedyReact(verified=frozenset(r.hypothesis.id for r in results))
            outcome = await attempt.run(
                incident, reasoner=reasoner, toolbox=toolbox, meter=meter, topology=topology, recall=with_learned
            )
            results.extend(outcome.results)
            proposed.extend(h for h in outcome.proposed if all(h.id != p.id for p in proposed))
            if proven(outcome.results) or investigation_spent(meter) or any(map(stopped_by_budget, outcome.results)):
                break
            new = 0
            for r in outcome.results:
                if r.hypothesis.id in reflected:
                    continue
                lesson = await reflect(reasoner, incident, r, incident.window.end, toolbox.observations)
                reflected[r.hypothesis.id] = lesson
                if lesson is not None and all(lesson.id != le.id for le in learned):
                    learned.append(lesson)
                    new += 1
            if not new:  # nothing learned: the next attempt would repeat this one
                break
        assert outcome is not None
        return Outcome(
            triage=outcome.triage,
            results=results,
            proposed=proposed,
            retrieved=list(retrieved.values()),
            reflected=reflected,
        )
