"""Reading models tolerantly: action forms, the Thought/Action/Final text format, native tool calls, JSON."""

from __future__ import annotations

import pytest

from opsagent.llm.parsing import extract_json, parse_action, parse_text, parse_tool_reply
from opsagent.llm.toolschema import tool_schemas
from opsagent.models import Action, PromptMessage, PromptToolCall
from opsagent.tools import TOOLS

SIGNAL = Action(tool="metrics.signal", args={"signal": "threadpool_active", "service": "order-service"})


@pytest.mark.parametrize(
    "text",
    [
        'metrics.signal{"signal": "threadpool_active", "service": "order-service"}',
        'metrics.signal[{"signal": "threadpool_active", "service": "order-service"}]',
        "metrics.signal(signal=threadpool_active, service=order-service)",
        "metrics.signal[signal='threadpool_active', service='order-service']",
        "metrics.signal[threadpool_active, order-service]",
        "metrics.signal(threadpool_active, order-service)",
        "metrics.signal threadpool_active, order-service",
        "`metrics_signal`(threadpool_active, order-service)",
        'Metrics.Signal {"signal": "threadpool_active", "service": "order-service"}',
        '{"tool": "metrics.signal", "args": {"signal": "threadpool_active", "service": "order-service"}}',
        '{"name": "metrics_signal", "arguments": "{\\"signal\\": \\"threadpool_active\\", \\"service\\": \\"order-service\\"}"}',
        '{"action": "metrics.signal", "action_input": {"signal": "threadpool_active", "service": "order-service"}}',
    ],
)
def test_action_forms(text: str) -> None:
    assert parse_action(text) == SIGNAL


def test_single_argument_fills_the_first_field_and_numbers_are_numbers() -> None:
    assert parse_action("logs.summary order-service") == Action(tool="logs.summary", args={"service": "order-service"})
    assert parse_action("changes.list(service=order-service, before_min=90)") == Action(
        tool="changes.list", args={"service": "order-service", "before_min": 90}
    )
    assert parse_action("metrics.scan[]") == Action(tool="metrics.scan")
    assert parse_action("none") is None


def test_unknown_tools_and_odd_arguments_pass_through_for_the_toolbox_to_answer() -> None:
    assert parse_action("kubectl.delete(pod=order-1)") == Action(tool="kubectl.delete", args={"pod": "order-1"})
    odd = parse_action('logs.summary{"service": {"name": "x"}, "level": null}')
    assert odd == Action(tool="logs.summary", args={"service": '{"name": "x"}'})


def test_text_reply_with_thought_evidence_and_action() -> None:
    reply = parse_text(
        "Thought: the pool shrank\n"
        "  right before onset\n"
        'Evidence: {"observation_id": "c-5b47ea", "stance": "supports", "reason": "32 -> 4"}\n'
        "Evidence: m-fb3797 supports: pinned at 4/4\n"
        "Action: metrics.signal[threadpool_active, order-service]\n"
        "Observation: threadpool_active is at 4/4, so the root cause is confirmed\n"
        "Final: config change"
    )
    assert reply.thought.startswith("the pool shrank") and "right before onset" in reply.thought
    assert [c.observation_id for c in reply.claims] == ["c-5b47ea", "m-fb3797"]
    assert reply.actions == [(None, SIGNAL)]
    assert reply.final is None, "what the model wrote after its own Observation line is ignored"


def test_final_and_markdown_labels() -> None:
    reply = parse_text("**Thought:** enough\n**Final Answer:** the change did it")
    assert reply.final == "the change did it" and not reply.actions and not reply.problems


def test_langchain_action_input() -> None:
    reply = parse_text(
        'Action: metrics.signal\nAction Input: {"signal": "threadpool_active", "service": "order-service"}'
    )
    assert reply.actions == [(None, SIGNAL)]


@pytest.mark.parametrize("text", ["", "   ", "I think it is the database."])
def test_empty_or_formatless_replies_are_problems_not_exceptions(text: str) -> None:
    reply = parse_text(text)
    assert reply.empty and reply.problems


def test_bad_evidence_is_a_problem_the_model_is_told() -> None:
    reply = parse_text('Evidence: {"observation_id": "m-1"}\nAction: metrics.scan')
    assert reply.actions and reply.problems and "stance" in reply.problems[0]


def call(name: str, arguments: str, i: int = 0) -> PromptToolCall:
    return PromptToolCall(id=f"c{i}", name=name, arguments=arguments)


def test_native_tool_calls_cite_and_act() -> None:
    message = PromptMessage(
        role="assistant",
        content="reading the pool",
        tool_calls=[
            call("cite_evidence", '{"evidence": [{"observation_id": "c-5b47ea", "stance": "supports"}]}'),
            call("metrics_signal", '{"signal": "threadpool_active", "service": "order-service"}', 1),
            call("traces_summary", '{"service": "order-service"}', 2),
        ],
    )
    reply = parse_tool_reply(message)
    assert reply.thought == "reading the pool" and reply.claims[0].observation_id == "c-5b47ea"
    assert [a for _, a in reply.actions] == [SIGNAL, Action(tool="traces.summary", args={"service": "order-service"})]


def test_native_tool_calls_with_arguments_that_are_not_json() -> None:
    message = PromptMessage(
        role="assistant",
        tool_calls=[
            call("metrics_signal", "signal=threadpool_active, service=order-service"),
            call("final", "{oops", 1),
        ],
    )
    reply = parse_tool_reply(message)
    assert reply.actions == [("c0", SIGNAL)] and reply.final == "done" and "c1" in reply.call_notes


def test_a_tool_reply_without_tool_calls_is_read_as_text() -> None:
    reply = parse_tool_reply(PromptMessage(role="assistant", content="Action: metrics.scan"))
    assert reply.actions == [(None, Action(tool="metrics.scan"))]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": 1}', {"a": 1}),
        ('Sure! Here it is:\n```json\n{"a": [1, 2]}\n```\nanything else?', {"a": [1, 2]}),
        ('My answer: {"a": 2} -- hope it helps', {"a": 2}),
        ("[1, 2]", [1, 2]),
    ],
)
def test_json_is_found_in_fences_and_prose(text: str, value: object) -> None:
    assert extract_json(text) == (value, None)


@pytest.mark.parametrize("text", ["", "{'a': 1", "no json here"])
def test_no_json_says_why(text: str) -> None:
    value, problem = extract_json(text)
    assert value is None and problem


def test_tool_schemas_come_from_the_tool_layer() -> None:
    schemas = {s["function"]["name"]: s["function"] for s in tool_schemas()}
    for name, spec in TOOLS.items():
        fn = schemas[name.replace(".", "_")]
        assert set(fn["parameters"].get("properties", {})) == set(spec.args.model_fields)
        assert fn["parameters"]["additionalProperties"] is False
    assert {"cite_evidence", "final"} <= set(schemas)
    assert {s["function"]["name"] for s in tool_schemas(actions=False)} == {"cite_evidence", "final"}
