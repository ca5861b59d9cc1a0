"""The planning strategies (tot, plan, mcts, reflexion) behind the same interface as hybrid and react:
the same budgets enforced by the loop, the same judge, deterministic with the playbook reasoner, usable
with the LLM reasoner, each showing its own behaviour on a recorded incident."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from opsagent.errors import ConfigError
from opsagent.lessons import Retrieved, concrete
from opsagent.llm import FunctionModel, follow_hints
from opsagent.loop import Budget, Concluded, Event, Started, StepTaken
from opsagent.models import Hypothesis, Incident, Observation, Report, Step, Symptom
from opsagent.pipeline import investigate_fixture
from opsagent.plan import load_default_playbooks
from opsagent.reasoner import Decision, PlaybookReasoner
from opsagent.report import to_markdown
from opsagent.strategies import STRATEGIES, strategy
from opsagent.strategies.mcts import Node, backpropagate, select, uct
from opsagent.strategies.plan import Plan, objective_digest
from opsagent.triage import Triage
from tests.conftest import INCIDENTS, ORDER_INCIDENT, ROOT
from tests.llm_support import reasoner as llm_reasoner

NEW = ["tot", "plan", "mcts", "reflexion"]
PLAYBOOKS = load_default_playbooks()


def _named(event: Event) -> tuple[str, dict[str, Any]]:
    """An event as (its name, the hypothesis it is about and its verdict): what these tests compare."""
    if isinstance(event, Concluded):
        return event.event, {"id": event.hypothesis_id, "status": event.verdict.status}
    if isinstance(event, StepTaken):
        return event.event, {"id": event.hypothesis_id}
    if isinstance(event, Started):
        return "hypothesis", {"id": event.hypothesis.id}
    return event.event, {}


def investigate(
    path: Path, name: str, *, budget: Budget | None = None, **kwargs: Any
) -> tuple[Report, list[tuple[str, dict[str, Any]]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    report, _ = asyncio.run(
        investigate_fixture(
            path,
            playbooks=PLAYBOOKS,
            strategy_name=name,
            budget=budget,
            listener=lambda event: events.append(_named(event)),
            **kwargs,
        )
    )
    return report, events


# ---------------------------------------------------------------- the interface


def test_every_strategy_of_the_seeds_can_be_chosen_by_name() -> None:
    assert list(STRATEGIES) == ["hybrid", "react", "tot", "plan", "mcts", "reflexion"]
    assert {name: strategy(name).name for name in STRATEGIES} == {name: name for name in STRATEGIES}


def test_options_are_validated_and_named_in_the_report() -> None:
    chosen = strategy("tot:beam=3, depth=4")
    assert chosen.label == "tot:beam=3,depth=4"
    assert strategy("mcts:exploration=1.0").label == "mcts"  # a default given is no change
    with pytest.raises(ConfigError, match=r"'width=2' is not an option; its options: breadth .*depth .*beam"):
        strategy("tot:width=2")
    with pytest.raises(ConfigError, match="iterations"):
        strategy("mcts:iterations=0")
    with pytest.raises(ConfigError, match="unknown strategy 'lats'"):
        strategy("lats")
    report, _ = investigate(ORDER_INCIDENT, "tot:breadth=3")
    assert report.strategy == "tot:breadth=3"


# ---------------------------------------------------------------- budgets, enforced by the loop


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_a_one_step_budget_ends_inconclusive_with_the_budget_named(name: str) -> None:
    report, _ = investigate(ORDER_INCIDENT, name, budget=Budget(max_steps=1))
    assert report.status == "inconclusive" and report.root_cause is None
    assert report.results and all(len(r.steps) <= 1 for r in report.results)
    assert report.budget_exhausted == "budget exhausted: 1 steps"
    assert "Stopped early: budget exhausted: 1 steps" in report.statement


@pytest.mark.parametrize("name", NEW)
def test_the_token_budget_stops_the_search_within_one_round_of_calls(name: str) -> None:
    budget = Budget(token_budget=16_000)  # triage of this incident reads ~15,400 tokens
    report, _ = investigate(ORDER_INCIDENT, name, budget=budget)
    unlimited, _ = investigate(ORDER_INCIDENT, name)
    assert report.budget_exhausted == "budget exhausted: 16000 tokens" or report.cost.tokens < 16_000
    largest = max(o.tokens for o in report.observations)
    # calls in flight when the budget is crossed may each finish: at most a beam of them
    assert report.cost.tokens <= budget.token_budget + budget.beam * (largest + 100)
    assert report.cost.steps <= unlimited.cost.steps


@pytest.mark.parametrize("name", NEW)
def test_the_wall_clock_stops_the_search_and_is_named(name: str) -> None:
    ticks = iter(range(0, 100_000, 30))  # every look at the clock advances 30 s: in a replay, that does not count
    report, _ = investigate(ORDER_INCIDENT, name, budget=Budget(wall_s=2), clock=lambda: float(next(ticks)))
    assert report.status == "inconclusive"
    assert report.budget_exhausted == "budget exhausted: 2 s wall clock (replay: 0.5 s a tool call)"
    assert report.cost.tool_calls == 3  # and the onset's look at the alerting signal: 4 calls of 0.5 s


# ---------------------------------------------------------------- determinism

_SCRIPT = """
import asyncio, json, sys
from pathlib import Path
from opsagent.logconfig import configure
from opsagent.pipeline import investigate_fixture

configure(level="error")

async def main():
    for path in sys.argv[2:]:
        for name in sys.argv[1].split(","):
            report, _ = await investigate_fixture(Path(path), strategy_name=name)
            data = report.model_dump(mode="json")
            data["cost"].pop("wall_ms")
            print(json.dumps(data, sort_keys=True))

asyncio.run(main())
"""

DETERMINISM = ["order-service-threadpool-config", "ledger-db-pool-exhaustion", "product-npe-deploy"]


def _reports(seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    dirs = [str(INCIDENTS / d) for d in DETERMINISM]
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, ",".join(NEW), *dirs],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_the_playbook_reasoner_gives_the_same_report_under_two_hash_seeds() -> None:
    first, second = _reports("0"), _reports("4242")
    assert first.count("\n") == len(NEW) * len(DETERMINISM)
    assert first == second


# ---------------------------------------------------------------- with the LLM reasoner


@pytest.mark.parametrize("name", NEW)
def test_the_llm_reasoner_runs_every_strategy_within_its_budget(name: str) -> None:
    budget = Budget()
    r = llm_reasoner(FunctionModel(follow_hints), mode="tools")
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, reasoner=r, strategy_name=name, budget=budget))
    assert report.llm is not None and report.llm.usage.calls > 0
    assert report.llm.usage.prompt_tokens + report.llm.usage.completion_tokens <= budget.token_budget
    assert all(len(res.steps) <= budget.max_steps for res in report.results)
    assert report.suspects and report.suspects[0].component == "order-service"
    observed = {o.id for o in report.observations}
    assert {e.observation_id for e in report.evidence} <= observed


# ---------------------------------------------------------------- tot: the whole tree


def test_tot_backtracks_from_a_refuted_state_and_does_not_stop_at_the_first_confirmation() -> None:
    report, events = investigate(ORDER_INCIDENT, "tot")
    verdicts = [(i, f["id"], f["status"]) for i, (e, f) in enumerate(events) if e == "verdict"]
    refuted = [i for i, _, status in verdicts if status == "refuted"]
    confirmed = [i for i, _, status in verdicts if status == "confirmed"]
    assert refuted and confirmed and refuted[0] < confirmed[0]  # a dead end, then another branch proves a cause
    later_steps = [f["id"] for e, f in events[confirmed[0] :] if e == "step"]
    assert later_steps, "the tree goes on after the first confirmation"
    hybrid, _ = investigate(ORDER_INCIDENT, "hybrid")
    assert len(report.results) > len(hybrid.results)  # more of the tree is searched than hybrid's beam
    assert (report.root_cause.component, report.root_cause.kind) == ("order-service", "config_change")  # type: ignore[union-attr]


def test_tot_keeps_only_the_beam_and_says_why_the_rest_waited() -> None:
    report, _ = investigate(ORDER_INCIDENT, "tot:beam=1,breadth=2,depth=2")
    steps = sum(len(r.steps) for r in report.results)
    assert steps <= 1 * 2 * 2  # b x w children a level, d levels
    waited = [r for r in report.results if r.stop_detail.startswith("stopped by tot: left out of the beam")]
    done = [r for r in report.results if r.stop_detail.startswith("stopped by tot: the tree is done")]
    assert waited or done
    assert all(r.verdict.status in ("inconclusive", "confirmed", "refuted", "probable") for r in report.results)


# ---------------------------------------------------------------- plan: a locked objective, re-planned


def test_plan_re_plans_when_an_observation_contradicts_it_and_the_report_has_every_revision() -> None:
    report, _ = investigate(ORDER_INCIDENT, "plan")
    plan = report.plan
    assert len(plan) >= 2 and plan[0].index == 0 and plan[0].reason.startswith("up front")
    assert [p.index for p in plan] == list(range(len(plan)))
    first = [i.hypothesis_id for i in plan[0].items]
    assert first[:2] == ["config-change@order-service", "db-pool-exhaustion@order-service"]
    assert all(i.next_call for i in plan[0].items)  # each planned hypothesis has its first check
    replan = next(p for p in plan if "db-pool-exhaustion@order-service: refuted" in p.dropped)
    assert "was refuted" in replan.reason and "db_connections_used" in replan.reason
    refuting = {e.observation_id for r in report.refuted for e in r.verdict.refuting}
    assert replan.observation_id in refuting  # the observation that contradicted the plan is cited
    assert all(i.hypothesis_id != "db-pool-exhaustion@order-service" for i in replan.items)
    assert plan[-1].reason.startswith("the objective is answered")
    markdown = to_markdown(report)
    assert "## Plan" in markdown and replan.reason in markdown and f"`{replan.observation_id}`" in markdown
    plan_section = markdown[markdown.index("## Plan") :]
    assert f"{replan.index}. {replan.reason} (`{replan.observation_id}`)" in plan_section  # the cited id as code
    assert (report.root_cause.component, report.root_cause.kind) == ("order-service", "config_change")  # type: ignore[union-attr]


class _Meddling(PlaybookReasoner):
    """A reasoner that tries to change the question whenever it is asked anything: when the plan is
    made, at every check the plan executes, and so before and after every re-plan."""

    attempts: list[str]

    def _meddle(self, incident: Incident) -> None:
        for field, value in (("symptom", Symptom.errors), ("services", ("cart-service",))):
            try:
                setattr(incident, field, value)
            except ValidationError as exc:
                self.attempts.append(exc.errors()[0]["type"])

    def rank(
        self, incident: Incident, candidates: list[Hypothesis], triage: Triage, lessons: Sequence[Retrieved]
    ) -> list[Hypothesis]:
        self._meddle(incident)
        return super().rank(incident, candidates, triage, lessons)

    async def decide(
        self,
        incident: Incident,
        hypothesis: Hypothesis,
        steps: Sequence[Step],
        observations: Mapping[str, Observation],
        *,
        final: bool,
    ) -> Decision:
        self._meddle(incident)
        return await super().decide(incident, hypothesis, steps, observations, final=final)


def test_plan_objective_is_locked_a_re_plan_cannot_change_it() -> None:
    meddling = _Meddling(PLAYBOOKS)
    meddling.attempts = []
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, reasoner=meddling, strategy_name="plan"))
    assert len(meddling.attempts) > 2 * len(report.plan) and set(meddling.attempts) == {"frozen_instance"}
    assert report.incident.symptom == Symptom.latency and report.incident.services == ("order-service",)
    assert len(report.plan) >= 2
    assert {p.objective for p in report.plan} == {objective_digest(report.incident)}


def test_a_plan_refuses_to_be_revised_for_another_objective() -> None:
    report, _ = investigate(ORDER_INCIDENT, "plan")
    plan = Plan(report.incident)
    plan.revise(report.incident, [], reason="up front")
    other = report.incident.model_copy(update={"symptom": Symptom.errors})
    with pytest.raises(ValueError, match="the objective is locked"):
        plan.revise(other, [], reason="a re-plan that changes the question")
    assert len(plan.revisions) == 1 and plan.objective is report.incident


# ---------------------------------------------------------------- mcts: UCT, rollouts, reflection


def _tree() -> tuple[Node, dict[str, Node]]:
    root = Node("root", visits=10)
    a = root.add(Node("a", prior=0.9, visits=6, total=3.0))  # mean 0.5, visited most
    b = root.add(Node("b", prior=0.5, visits=3, total=2.1))  # mean 0.7
    c = root.add(Node("c", prior=0.2, visits=1, total=0.1))  # mean 0.1, barely visited
    done = root.add(Node("done", prior=1.0, visits=0, terminal=True))
    b1 = b.add(Node("b1", visits=2, total=1.6))  # mean 0.8
    b2 = b.add(Node("b2", visits=1, total=0.5))  # mean 0.5
    return root, {"a": a, "b": b, "c": c, "done": done, "b1": b1, "b2": b2}


def test_uct_is_the_mean_value_plus_the_exploration_bonus() -> None:
    _, n = _tree()
    assert uct(n["a"], exploration=1.0) == pytest.approx(0.5 + (2.302585 / 6) ** 0.5)
    assert uct(n["c"], exploration=0.0) == pytest.approx(0.1)
    assert uct(Node("never"), exploration=1.0) == float("inf")


def test_uct_selection_exploits_explores_and_never_picks_a_terminal_node() -> None:
    root, _ = _tree()
    assert [x.label for x in select(root, exploration=0.0)] == ["root", "b", "b1"]  # the best means
    # c=1: a's bonus 0.62 (+0.5), b's 0.88 (+0.7), c's 1.52 (+0.1): the barely visited child wins
    assert [x.label for x in select(root, exploration=1.0)] == ["root", "c"]
    unvisited = root.add(Node("new", prior=0.3))
    assert select(root, exploration=0.0)[1] is unvisited  # never visited comes first, terminal or not
    unvisited.terminal = True
    likelier = root.add(Node("likelier", prior=0.8))
    root.add(Node("less", prior=0.1))
    assert select(root, exploration=0.0)[1] is likelier  # among the unvisited, the likelier
    for node in root.children:
        node.terminal = True
    assert select(root, exploration=1.0) == [root]  # nothing left to select


def test_backpropagation_adds_the_reward_along_the_path() -> None:
    root, n = _tree()
    path = select(root, exploration=0.0)
    backpropagate(path, 1.0)
    assert (root.visits, n["b"].visits, n["b1"].visits) == (11, 4, 3)
    assert n["b"].mean == pytest.approx(3.1 / 4) and n["b1"].mean == pytest.approx(2.6 / 3)


def test_mcts_reflects_on_a_failed_rollout_and_the_lesson_steers_the_rest_of_the_search() -> None:
    path = INCIDENTS / "ledger-db-pool-exhaustion"
    report, events = investigate(path, "mcts")
    written = {lesson.id: lesson for lesson in report.lessons}
    steered = [
        r
        for r in report.results
        if any(note.split(":", 1)[0] in written for note in r.hypothesis.lesson_notes) and r.steps
    ]
    assert steered, "a hypothesis proposed after a failed rollout carries that rollout's lesson"
    r = steered[0]
    lesson = written[r.hypothesis.lesson_notes[0].split(":", 1)[0]]
    assert r.steps[0].action == concrete(lesson.next_action, r.hypothesis.component)  # the lesson's call first
    order = [(e, f.get("id"), f.get("status")) for e, f in events if e in ("hypothesis", "verdict")]
    source = next(x.hypothesis.id for x in report.refuted if x.hypothesis.component in lesson.services)
    assert order.index(("verdict", source, "refuted")) < order.index(("hypothesis", r.hypothesis.id, None))
    assert (report.root_cause.component, report.root_cause.kind) == ("ledger-service", "db_pool_exhaustion")  # type: ignore[union-attr]


# ---------------------------------------------------------------- reflexion: retried with lessons


def test_reflexion_retries_from_the_lessons_of_the_failed_attempt() -> None:
    path = INCIDENTS / "shipping-quota-429"  # react ends inconclusive here, with one hypothesis refuted
    react, _ = investigate(path, "react")
    report, events = investigate(path, "reflexion")
    assert react.status == "inconclusive" and react.refuted
    written = {lesson.id for lesson in report.lessons}
    retried = [u for u in report.lessons_used if u.lesson_id in written]
    assert retried and retried[0].relevance > 0, "the second attempt retrieved what the first one taught"
    verified = [f["id"] for e, f in events if e == "hypothesis"]
    assert len(verified) == len(set(verified)), "an attempt does not chase again what an earlier one verified"
    assert report.cost.tool_calls == react.cost.tool_calls  # the retry reads what it re-reads from the cache
    assert report.cost.cache_hits > react.cost.cache_hits
    assert report.status == "inconclusive"  # what it learned changed nothing here: it stopped, not looped


def test_reflexion_is_react_when_the_first_attempt_proves_a_cause() -> None:
    react, _ = investigate(ORDER_INCIDENT, "react")
    report, _ = investigate(ORDER_INCIDENT, "reflexion")
    assert react.status == "confirmed"
    assert report.model_dump(exclude={"strategy", "cost"}) == react.model_dump(exclude={"strategy", "cost"})


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_every_strategy_draws_its_search_tree_with_every_hypothesis_it_verified(name: str) -> None:
    report, _ = investigate(ORDER_INCIDENT, name)
    assert report.search is not None and report.search.rounds, "the live view and the report show the proposals"
    in_tree = {n.hypothesis_id for n in report.search.nodes() if n.verified}
    assert {r.hypothesis.id for r in report.results if r.steps} <= in_tree
