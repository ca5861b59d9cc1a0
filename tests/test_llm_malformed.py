"""A model that misbehaves, and a server that fails: bad JSON (repaired once, then the playbooks stand
in), unknown tools, made-up arguments, empty replies, 429s, timeouts, and budgets the model cannot
talk its way past."""

from __future__ import annotations

import json

import httpx
import respx

from opsagent.llm import FunctionModel, ModelReply, ModelRequest, ScriptedModel, follow_hints
from opsagent.loop import Budget
from opsagent.models import StopReason
from tests.llm_support import ENDPOINT, investigate, reasoner

GOOD_PROPOSAL = json.dumps(
    {
        "hypotheses": [
            {
                "component": "order-service",
                "kind": "config_change",
                "statement": "the executor resize shortly before onset caused it",
                "confirm_if": ["a config change before onset"],
                "refute_if": ["no config change"],
                "prior": 0.6,
            }
        ]
    }
)


def proposing(*replies: str) -> FunctionModel:
    """Answers propose with ``replies`` in turn, and follows the hints for everything else."""
    queue = list(replies)

    def fn(request: ModelRequest) -> ModelReply | str:
        if request.task == "propose" and queue:
            return queue.pop(0)
        return follow_hints(request)

    return FunctionModel(fn)


def test_bad_json_twice_falls_back_to_the_playbooks_and_says_so() -> None:
    model = proposing("Here are my ideas: {hypotheses: [config_change]", '```json\n{"hypotheses": [{]}\n```')
    report = investigate(reasoner(model))
    assert report.llm is not None and report.llm.fallbacks >= 1
    assert any("invalid twice" in n and "playbooks' proposals were used" in n for n in report.llm.notes)
    assert [x.purpose for x in report.llm.exchanges[:2]] == ["propose", "repair"]
    assert report.root_cause is not None and report.root_cause.kind == "config_change"


def test_one_repair_with_the_validation_error_fed_back() -> None:
    invalid = json.dumps(
        {"hypotheses": [{"component": "order-svc", "kind": "config_change", "statement": "short", "prior": 3}]}
    )
    model = proposing(invalid, GOOD_PROPOSAL)
    report = investigate(reasoner(model))
    assert report.llm is not None and report.llm.fallbacks == 0
    repair = report.llm.exchanges[1]
    assert repair.purpose == "repair"
    told = repair.request[-1].content or ""
    assert "unknown component 'order-svc'" in told and "confirm_if" in told and "prior" in told
    assert report.root_cause is not None and report.root_cause.kind == "config_change"


def test_unknown_tool_and_made_up_arguments_become_observations_saying_what_exists() -> None:
    def fn(request: ModelRequest) -> ModelReply | str:
        if request.task != "verify" or request.hypothesis_id != "config-change@order-service":
            return follow_hints(request)
        if request.turn == 0:
            return ModelReply(tool_calls=[("kubectl_rollout_undo", {"deployment": "order-service"})])
        if request.turn == 1:
            return (
                "Thought: try the pool\nAction: metrics.signal(signal=threadpool_active, pod=order-7f9, verbose=true)"
            )
        return follow_hints(request)

    report = investigate(reasoner(FunctionModel(fn), mode="auto"))
    config = next(r for r in report.results if r.hypothesis.id == "config-change@order-service")
    observed = {o.id: o for o in report.observations}
    first, second = (observed[s.observation_id or ""] for s in config.steps[:2])
    assert not first.ok and "unknown tool 'kubectl_rollout_undo'" in first.text and "metrics.signal(" in first.text
    assert not second.ok and "bad arguments for metrics.signal" in second.text and "pod" in second.text
    assert report.llm is not None
    third_prompt = next(
        x for x in report.llm.exchanges if x.hypothesis_id == "config-change@order-service" and x.purpose == "act"
    )
    assert third_prompt is not None
    assert config.verdict.status == "confirmed", "the loop went on after both errors"


def test_an_empty_reply_gets_one_more_chance_with_what_was_wrong() -> None:
    def fn(request: ModelRequest) -> ModelReply | str:
        if request.task == "verify" and request.turn == 0:
            return ModelReply(content="")
        return follow_hints(request)

    report = investigate(reasoner(FunctionModel(fn), mode="text"))
    assert report.llm is not None
    retried = [
        x
        for x in report.llm.exchanges
        if x.purpose == "act" and any("reply was empty" in (m.content or "") for m in x.request)
    ]
    assert retried, "the format error went back to the model"
    assert report.root_cause is not None and report.root_cause.kind == "config_change"


def test_a_model_that_only_ever_replies_nonsense_ends_verification_not_the_run() -> None:
    def fn(request: ModelRequest) -> ModelReply | str:
        return GOOD_PROPOSAL if request.task == "propose" else "I am not sure what to do."

    report = investigate(reasoner(FunctionModel(fn), mode="text"))
    assert report.status == "inconclusive"
    assert report.llm is not None and any("could not be read twice" in n for n in report.llm.notes)


def test_a_model_that_never_says_final_is_ended_by_the_step_budget() -> None:
    def fn(request: ModelRequest) -> ModelReply | str:
        if request.task != "verify":
            return follow_hints(request)
        return ModelReply(
            tool_calls=[("logs_summary", {"service": "order-service", "text": f"attempt {request.turn}"})]
        )

    report = investigate(reasoner(FunctionModel(fn)), budget=Budget(max_steps=3))
    assert all(len(r.steps) <= 3 for r in report.results)
    assert any(r.stop_reason is StopReason.steps for r in report.results)
    assert report.budget_exhausted == "budget exhausted: 3 steps"


def test_the_token_budget_covers_the_model_and_no_call_overruns_it() -> None:
    def fn(request: ModelRequest) -> ModelReply | str:
        if request.task != "verify":
            return follow_hints(request)
        return ModelReply(
            tool_calls=[("logs_summary", {"service": "order-service", "text": f"attempt {request.turn}"})]
        )

    budget = Budget(token_budget=20_000, max_steps=50)
    report = investigate(reasoner(FunctionModel(fn)), budget=budget)
    assert report.llm is not None and report.llm.budget_exhausted is not None
    assert report.llm.budget_exhausted.startswith("budget exhausted: 20000 tokens")
    assert any("playbook reasoner stands in while budget lasts" in n for n in report.llm.notes)
    spent = report.llm.usage.prompt_tokens + report.llm.usage.completion_tokens
    assert spent <= budget.token_budget
    assert report.cost.tokens >= spent, "model tokens are charged to the investigation's meter"
    assert report.cost.tokens <= budget.token_budget + max(o.tokens for o in report.observations)


@respx.mock
def test_429_then_success_inside_an_investigation() -> None:
    model = FunctionModel(follow_hints)
    limited = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        limited["n"] += 1
        if limited["n"] == 1:
            return httpx.Response(429, headers={"Retry-After": "1"}, json={"error": {"message": "rate limited"}})
        return model.handle(request)

    respx.post(ENDPOINT).mock(side_effect=handler)
    report = investigate(reasoner())
    assert report.llm is not None and report.llm.exchanges[0].attempts == 2
    assert report.llm.fallbacks == 0 and report.root_cause is not None


@respx.mock
def test_a_model_that_times_out_is_replaced_by_the_playbooks_and_the_report_says_so() -> None:
    route = respx.post(ENDPOINT).mock(side_effect=httpx.ReadTimeout("no answer"))
    report = investigate(reasoner(retries=1))
    assert route.call_count == 2, "once unavailable after its retries, the model is not asked again"
    assert report.llm is not None and report.llm.exchanges[0].error is not None
    assert any("model unavailable" in n for n in report.llm.notes) and report.llm.fallbacks >= 1
    assert report.status == "confirmed" and report.root_cause is not None
    assert report.root_cause.kind == "config_change"


def test_a_server_without_tool_calling_switches_to_the_text_format() -> None:
    def fn(request: ModelRequest) -> ModelReply | str:
        if request.tools:
            return ModelReply(status=400, content="tools are not supported by this model")
        return follow_hints(request)

    report = investigate(reasoner(FunctionModel(fn), mode="auto"))
    assert report.llm is not None and report.llm.mode == "text"
    assert any("switched to the text format" in n for n in report.llm.notes)
    assert report.root_cause is not None and report.root_cause.kind == "config_change"


def test_scripted_model_replays_in_order_then_finishes() -> None:
    model = ScriptedModel([GOOD_PROPOSAL, "Thought: look\nAction: changes.list(service=order-service)"])
    report = investigate(reasoner(model, mode="text"))
    assert report.llm is not None and report.llm.usage.calls >= 3
    assert model.replies == []
