"""Fake models that ship in the package, for tests and demos (like pydantic-ai's FunctionModel).

They sit behind the HTTP API, not beside it: :meth:`FunctionModel.handle` takes the
``httpx.Request`` the client sends and returns an OpenAI-shaped ``httpx.Response``, so the whole
path — redaction, retries, usage, parsing — runs as it does against a server. Use it as a transport
(``ChatClient(transport=model.transport())``) or as a respx side effect.

* :class:`FunctionModel` — a function of the request answers every call.
* :class:`ScriptedModel` — replies replayed in order.
* :class:`RecordedModel` — recorded response bodies, matched by task, hypothesis and turn.
* :func:`follow_hints` — a deterministic "model" that does what the prompt suggests: proposes the
  playbooks' candidates, makes the listed checks in order, cites each observation, writes the
  lesson the refutation suggests. It measures the machinery (calls, tokens, budgets), not a model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from opsagent.llm.parsing import parse_action, parse_text
from opsagent.llm.toolschema import CITE, FINAL, function_name, resolve
from opsagent.models import Action, PromptMessage, PromptToolCall
from opsagent.tokens import estimate_tokens


@dataclass(frozen=True)
class ModelRequest:
    """A chat-completions request as the fake sees it."""

    messages: list[PromptMessage]
    tools: list[str]
    body: dict[str, Any]

    @classmethod
    def from_http(cls, request: httpx.Request) -> ModelRequest:
        body = json.loads(request.content or b"{}")
        messages = [
            PromptMessage(
                role=m["role"],
                content=m.get("content"),
                tool_calls=[
                    PromptToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"])
                    for c in m.get("tool_calls") or []
                ],
                tool_call_id=m.get("tool_call_id"),
            )
            for m in body.get("messages", [])
        ]
        tools = [t["function"]["name"] for t in body.get("tools", [])]
        return cls(messages=messages, tools=tools, body=body)

    @property
    def task_text(self) -> str:
        return next((m.content or "" for m in self.messages if m.role == "user"), "")

    @property
    def task(self) -> str | None:
        match = re.search(r"^Task: (\w+)", self.task_text, re.M)
        return match.group(1) if match else None

    @property
    def hypothesis_id(self) -> str | None:
        match = re.search(r"^Hypothesis id: (\S+)", self.task_text, re.M)
        return match.group(1) if match else None

    @property
    def turn(self) -> int:
        """How many replies the model has given in this conversation so far."""
        return sum(1 for m in self.messages if m.role == "assistant")

    @property
    def text(self) -> str:
        return "\n".join(m.content or "" for m in self.messages)


@dataclass(frozen=True)
class ModelReply:
    content: str | None = None
    tool_calls: Sequence[tuple[str, dict[str, Any] | str]] = ()
    finish_reason: str | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    report_usage: bool = True


ModelFunction = Callable[[ModelRequest], ModelReply | str]


def completion_body(reply: ModelReply, request: ModelRequest, *, call_prefix: str) -> dict[str, Any]:
    calls: list[dict[str, Any]] = [
        {
            "id": f"{call_prefix}_{i}",
            "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
        }
        for i, (name, args) in enumerate(reply.tool_calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if calls:
        message["tool_calls"] = calls
    body: dict[str, Any] = {
        "id": f"chatcmpl-{call_prefix}",
        "object": "chat.completion",
        "model": request.body.get("model", "fake"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": reply.finish_reason or ("tool_calls" if calls else "stop"),
            }
        ],
    }
    if reply.report_usage:
        prompt = estimate_tokens(
            json.dumps(request.body.get("messages", [])) + json.dumps(request.body.get("tools", []))
        )
        completion = estimate_tokens((reply.content or "") + "".join(c["function"]["arguments"] for c in calls))
        body["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return body


class FunctionModel:
    """Answers every request with ``fn(request)``; keeps the requests it saw."""

    def __init__(self, fn: ModelFunction) -> None:
        self.fn = fn
        self.requests: list[ModelRequest] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        seen = ModelRequest.from_http(request)
        self.requests.append(seen)
        answer = self.fn(seen)
        reply = ModelReply(content=answer) if isinstance(answer, str) else answer
        if reply.status >= 400:
            payload = {"error": {"message": reply.content or "error", "type": "fake"}}
            return httpx.Response(reply.status, json=payload, headers=reply.headers)
        body = completion_body(reply, seen, call_prefix=f"call{len(self.requests)}")
        return httpx.Response(200, json=body, headers=reply.headers)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)


class ScriptedModel(FunctionModel):
    """Replies in order; once they run out, ``Final: script finished``."""

    def __init__(self, replies: Sequence[ModelReply | str]) -> None:
        self.replies = list(replies)
        super().__init__(self._next)

    def _next(self, request: ModelRequest) -> ModelReply | str:
        return self.replies.pop(0) if self.replies else "Final: script finished"


class RecordedModel(FunctionModel):
    """Recorded response bodies, each under ``{"task", "hypothesis", "turn"}``; a request nothing was
    recorded for is answered ``Final`` and kept in ``misses``."""

    def __init__(self, exchanges: Sequence[dict[str, Any]]) -> None:
        self.exchanges: dict[tuple[str | None, str | None, int], dict[str, Any]] = {
            (e["task"], e.get("hypothesis"), e.get("turn", 0)): e["response"] for e in exchanges
        }
        self.misses: list[tuple[str | None, str | None, int]] = []
        super().__init__(self._replay)

    def handle(self, request: httpx.Request) -> httpx.Response:
        seen = ModelRequest.from_http(request)
        key = (seen.task, seen.hypothesis_id, seen.turn)
        if key[0] is not None and key in self.exchanges:
            self.requests.append(seen)
            return httpx.Response(200, json=self.exchanges[key])
        return super().handle(request)

    def _replay(self, request: ModelRequest) -> ModelReply | str:
        self.misses.append((request.task, request.hypothesis_id, request.turn))
        return ModelReply(content="Final: nothing was recorded for this request")


# ---------------------------------------------------------------- a model that follows the hints

_CHECK = re.compile(r"^\d+\. ([a-z]+\.[a-z]+)(\{.*?\}) — ", re.M)
_OBSERVATION = re.compile(r"^Observation (\S+) from ", re.M)
_CANDIDATE = re.compile(r"^\{\"component\": .*\}$", re.M)
_REFUTING = re.compile(r"^- (\S+) \((.+?)\): (.*)$", re.M)


def _done(request: ModelRequest) -> list[Action]:
    out = []
    for m in request.messages:
        if m.role != "assistant":
            continue
        for c in m.tool_calls:
            name = resolve(c.name)
            if name not in (CITE, FINAL):
                out.append(Action(tool=name, args=json.loads(c.arguments or "{}")))
        if not m.tool_calls and m.content:
            out.extend(a for _, a in parse_text(m.content).actions)
    return out


def _propose(request: ModelRequest) -> ModelReply:
    k_match = re.search(r"Propose up to (\d+)", request.task_text)
    k = int(k_match.group(1)) if k_match else 5
    hypotheses = []
    for line in _CANDIDATE.findall(request.task_text)[:k]:
        c = json.loads(line)
        hypotheses.append(
            {
                "component": c["component"],
                "kind": c["kind"],
                "statement": c["statement"],
                "confirm_if": [f"the checks for {c['kind']} on {c['component']} hold"],
                "refute_if": [f"the checks for {c['kind']} on {c['component']} fail"],
                "prior": c["prior"],
                "rationale": "the playbooks suggest it and triage agrees",
            }
        )
    return ModelReply(content=json.dumps({"hypotheses": hypotheses}))


def _verify(request: ModelRequest) -> ModelReply:
    checks = [Action(tool=t, args=json.loads(a)) for t, a in _CHECK.findall(request.task_text)]
    done = {a.key() for a in _done(request)}
    seen = _OBSERVATION.findall(request.text)
    cited = set(
        re.findall(
            r"\"observation_id\": \"([^\"]+)\"",
            json.dumps([m.model_dump() for m in request.messages if m.role == "assistant"]),
        )
    )
    claims = [
        {"observation_id": o, "stance": "supports", "reason": "as the check expects"} for o in seen if o not in cited
    ]
    spent = "budget for this hypothesis is spent" in request.text[-600:]
    pending = [c for c in checks if c.key() not in done]
    nxt = pending[0] if pending and not spent else None
    if request.tools:
        calls: list[tuple[str, dict[str, Any] | str]] = [(CITE, {"evidence": claims})] if claims else []
        if nxt is not None:
            calls.append((function_name(nxt.tool), dict(nxt.args)))
        else:
            calls.append((FINAL, {"summary": "the listed checks are done"}))
        return ModelReply(content=None, tool_calls=calls)
    lines = ["Thought: " + (f"next, {nxt.key()}" if nxt is not None else "the listed checks are done")]
    lines += [f"Evidence: {json.dumps(c)}" for c in claims]
    lines.append(
        f"Action: {nxt.tool}{json.dumps(nxt.args)}" if nxt is not None else "Final: the listed checks are done"
    )
    return ModelReply(content="\n".join(lines))


def _reflect(request: ModelRequest) -> ModelReply:
    refuting = _REFUTING.findall(request.task_text)
    if not refuting:
        return ModelReply(content=json.dumps({"lesson": None}))
    obs_id, call, value = refuting[0]
    action = parse_action(call)
    signals = re.search(r"made it look likely: (.*)$", request.task_text, re.M)
    lesson = {
        "condition": f"{signals.group(1) if signals else 'the same signals'} looked like this fault",
        "signals": [s.strip() for s in signals.group(1).split(",")] if signals and signals.group(1) != "none" else [],
        "refuting_evidence": [{"observation_id": obs_id, "value": value}],
        "next_action": {"tool": action.tool, "args": dict(action.args)}
        if action is not None
        else {"tool": "metrics.scan"},
    }
    return ModelReply(content=json.dumps({"lesson": lesson}))


def follow_hints(request: ModelRequest) -> ModelReply:
    """Does what the prompt suggests; deterministic. See the module docstring."""
    if request.task == "propose":
        return _propose(request)
    if request.task == "verify":
        return _verify(request)
    if request.task == "reflect":
        return _reflect(request)
    return ModelReply(content="Final: I do not know this task")
