"""The LLM reasoner on the order-service incident, over a respx-mocked OpenAI-compatible endpoint
replaying recorded exchanges: tool-calling and text variants reach the right verdict. Then how model
and playbook proposals merge, how citations become evidence, and how lessons are checked."""

from __future__ import annotations

import asyncio
import io
import json

import httpx
import pytest
import respx
from rich.console import Console

from opsagent.catalog import default_catalog
from opsagent.fixtures import load
from opsagent.lessons import problems
from opsagent.llm import FunctionModel, ModelReply, ModelRequest, RecordedModel, follow_hints
from opsagent.llm.cli import print_prompts
from opsagent.llm.grounding import Claim, Rules
from opsagent.loop import Budget, Meter, verify
from opsagent.models import Hypothesis, SourceKind, StopReason
from opsagent.sources.replay import replay_sources
from opsagent.tools import Toolbox
from tests.conftest import ORDER_INCIDENT
from tests.llm_support import ENDPOINT, PLAYBOOKS, investigate, reasoner, recording


@pytest.mark.parametrize("variant", ["tools", "text"])
def test_recorded_exchanges_reach_the_config_change_verdict(variant: str) -> None:
    model = RecordedModel(recording(variant))
    with respx.mock:
        route = respx.post(ENDPOINT).mock(side_effect=model.handle)
        report = investigate(reasoner(mode=variant))
    assert model.misses == [], "every request the replay made was recorded"
    assert report.status == "confirmed" and report.root_cause is not None
    assert (report.root_cause.component, report.root_cause.kind) == ("order-service", "config_change")
    assert {e.observation_id for e in report.evidence} >= {"c-5b47ea", "m-fb3797"}
    refuted = {r.hypothesis.kind: r for r in report.refuted}
    assert "/200" in refuted["db_pool_exhaustion"].verdict.refuting[0].statement
    # the model proposed a hypothesis the playbooks had not: it was ranked with theirs
    assert ("payment-service", "downstream_latency") in {(s.component, s.kind) for s in report.suspects}
    config = next(r for r in report.results if r.hypothesis.kind == "config_change")
    assert any("proposed by the model" in w for w in config.hypothesis.why)
    # the model's lesson is concrete, so it is kept
    lesson = next(le for le in report.lessons if le.refuted_kind == "db_pool_exhaustion")
    assert not problems(lesson) and lesson.next_action.key() == "changes.list(before_min=60,service='{service}')"
    # transparency: every exchange is in the report, with the usage the server reported
    assert report.llm is not None and report.llm.mode == variant
    assert len(report.llm.exchanges) == route.call_count == len(recording(variant))
    assert report.llm.usage.calls == route.call_count and report.llm.usage.estimated_calls == 0
    recorded = sum(e["response"]["usage"]["prompt_tokens"] for e in recording(variant))
    assert report.llm.usage.prompt_tokens == recorded
    assert report.cost.tokens >= report.llm.usage.prompt_tokens + report.llm.usage.completion_tokens
    assert report.llm.fallbacks == 0 and report.llm.notes == []
    body = json.loads(route.calls[1].request.content)
    assert ("tools" in body) == (variant == "tools")


def test_prompts_are_viewable_from_the_report() -> None:
    report = investigate(reasoner(FunctionModel(follow_hints)))
    out = io.StringIO()
    print_prompts(report, Console(file=out, width=200), hypothesis="config-change@order-service", full=True)
    text = out.getvalue()
    assert "You are opsagent" in text and "Task: verify" in text and "c-5b47ea" in text
    assert "propose" not in text.split("\n")[0]
    assert "prompt + " in text and "completion tokens" in text


def test_react_with_the_model_choosing_what_to_verify() -> None:
    report = investigate(reasoner(FunctionModel(follow_hints)), strategy="react")
    assert report.llm is not None and report.llm.usage.calls > 0
    assert report.results and report.strategy == "react"


def test_price_table_puts_a_cost_in_the_report() -> None:
    r = reasoner(
        FunctionModel(follow_hints),
        model_name="gpt-4o-mini",
        prices={"gpt-4o-mini": {"input_per_mtok": 0.15, "output_per_mtok": 0.6}},
    )
    report = investigate(r)
    assert report.llm is not None
    u = report.llm.usage
    assert u.cost_usd == pytest.approx((u.prompt_tokens * 0.15 + u.completion_tokens * 0.6) / 1e6)


def test_model_hypotheses_are_validated_merged_and_ranked_with_the_playbooks() -> None:
    def fn(request: ModelRequest) -> ModelReply | str:
        if request.task == "propose":
            return json.dumps(
                {
                    "hypotheses": [
                        {
                            "component": "postgres-orders",
                            "kind": "slow_query",
                            "statement": "a slow query on postgres-orders holds order-service's requests",
                            "confirm_if": ["query latency up"],
                            "refute_if": ["query latency flat"],
                            "prior": 0.99,
                        },
                        {
                            "component": "order-service",
                            "kind": "config_change",
                            "statement": "the executor resize caused it",
                            "confirm_if": ["a config change before onset"],
                            "refute_if": ["no change"],
                            "prior": 0.7,
                            "rationale": "the pool shrank 32 -> 4",
                        },
                    ]
                }
            )
        return follow_hints(request)

    report = investigate(reasoner(FunctionModel(fn)))
    winner = next(r for r in report.results if r.hypothesis.kind == "config_change")
    assert winner.hypothesis.id == "config-change@order-service", "a model duplicate merges into the playbook's"
    assert any("the pool shrank 32 -> 4" in w for w in winner.hypothesis.why)
    suspects = {(s.component, s.kind) for s in report.suspects}
    assert ("postgres-orders", "slow_query") in suspects, "the model's own hypothesis is ranked with the rest"
    assert report.root_cause is not None and report.root_cause.kind == "config_change"


# ---------------------------------------------------------------- citations become evidence only by rule


def _toolbox() -> Toolbox:
    recording_, _ = load(ORDER_INCIDENT)
    catalog = default_catalog().merged(recording_.signals)
    from opsagent.incident import open_incident

    incident = open_incident(recording_.alert, window=recording_.window, baseline=recording_.baseline, id="t")
    return Toolbox(sources=replay_sources(recording_, catalog), catalog=catalog, incident=incident)


HYP = Hypothesis(
    id="config-change@order-service",
    component="order-service",
    kind="config_change",
    statement="s",
    confirm_if=[],
    refute_if=[],
    prior=0.35,
    score=0.5,
    playbook="config-change",
)


def test_citations_count_only_when_a_rule_for_the_kind_reads_them_in_the_data() -> None:
    from opsagent.models import Action

    box = _toolbox()

    async def calls() -> dict[str, str]:
        out = {}
        for key, action in {
            "change": Action(tool="changes.list", args={"service": "order-service", "before_min": 60}),
            "narrow": Action(tool="changes.list", args={"service": "order-service", "before_min": 1}),
            "pool": Action(tool="metrics.signal", args={"signal": "threadpool_active", "service": "order-service"}),
            "db": Action(tool="metrics.signal", args={"signal": "db_connections_used", "service": "order-service"}),
            "other": Action(tool="metrics.signal", args={"signal": "threadpool_active", "service": "payment-service"}),
        }.items():
            out[key] = (await box.call(action)).id
        return out

    ids = asyncio.run(calls())
    rules = Rules(PLAYBOOKS)
    claims = [
        Claim(observation_id=ids["change"], stance="refutes", reason="I misread it"),
        Claim(observation_id=ids["pool"], stance="supports"),
        Claim(observation_id=ids["db"], stance="supports", reason="not a reading for this kind"),
        Claim(observation_id=ids["narrow"], stance="supports", reason="a window too short to decide"),
        Claim(observation_id=ids["other"], stance="supports", reason="another component"),
        Claim(observation_id="m-000000", stance="supports", reason="made up"),
    ]
    grounded = rules.ground(claims, HYP, box.incident, box.observations)
    assert [(e.observation_id, e.stance) for e in grounded.evidence] == [
        (ids["change"], "supports"),
        (ids["pool"], "supports"),
    ]
    assert "core-pool-size" in grounded.evidence[0].statement, "the statement is the rule's reading, not the model's"
    notes = "\n".join(grounded.notes)
    assert "you said refutes; the data says otherwise" in notes
    assert notes.count("not counted") == 4 and "no observation 'm-000000'" in notes


def test_a_model_that_never_says_final_is_stopped_by_the_loop() -> None:
    def restless(request: ModelRequest) -> ModelReply:
        n = request.turn
        return ModelReply(tool_calls=[("logs_summary", {"service": "order-service", "text": f"retry {n}"})])

    box = _toolbox()
    r = reasoner(FunctionModel(restless))
    meter = Meter(budget=Budget(max_steps=3))
    r = r.bind(meter, box.observations)
    result = asyncio.run(
        verify(HYP, incident=box.incident, reasoner=r, toolbox=box, meter=meter, available={SourceKind.logs})
    )
    assert len(result.steps) == 3 and result.stop_reason is StopReason.steps
    assert result.stop_detail == "budget exhausted: 3 steps"
    assert result.verdict.status == "inconclusive"


class SlowTransport(httpx.AsyncBaseTransport):
    """The fake model, answering only after a pause, so concurrent calls are really in flight together."""

    def __init__(self, model: FunctionModel) -> None:
        self.model = model

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.05)
        await request.aread()
        return self.model.handle(request)


def test_concurrent_hypotheses_cannot_jointly_overrun_the_budget() -> None:
    box = _toolbox()
    model = FunctionModel(follow_hints)
    budget = Budget(token_budget=2_400)  # one first call fits (with its completion reserved), two do not
    meter = Meter(budget=budget)
    r = reasoner(transport=SlowTransport(model)).bind(meter, box.observations)
    other = HYP.model_copy(
        update={
            "id": "db-pool-exhaustion@order-service",
            "kind": "db_pool_exhaustion",
            "playbook": "db-pool-exhaustion",
        }
    )

    async def both() -> None:
        await asyncio.gather(
            *(
                verify(h, incident=box.incident, reasoner=r, toolbox=box, meter=meter, available={SourceKind.metrics})
                for h in (HYP, other)
            )
        )

    asyncio.run(both())
    record = r.transcript()
    assert record.usage.prompt_tokens + record.usage.completion_tokens <= budget.token_budget
    assert record.budget_exhausted is not None and record.fallbacks >= 1
