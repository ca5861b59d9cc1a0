"""The conversation about one hypothesis: turns kept as data, rendered into messages on demand.

A turn is the model's reply and what went back for it (an observation once the loop has run the
call, and notes: which citations counted, what could not be read). Messages are rendered from the
turns every time, so context management is a rendering choice: the newest turns in full (each
observation capped), older ones shortened to their first line, the oldest dropped with a note that
their observations can still be cited by id — whatever keeps the prompt inside the model's window.
In tool-calling mode every tool call gets its tool message, as the API requires.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from opsagent.llm.client import ToolSchema, wire_message
from opsagent.llm.prompts import Prompts
from opsagent.llm.views import observation_block
from opsagent.models import Observation, PromptMessage
from opsagent.tokens import CONSERVATIVE, estimate_tokens


@dataclass
class Result:
    """What goes back to the model for one tool call (or, in text mode, for the whole reply)."""

    call_id: str | None
    notes: list[str] = field(default_factory=list)
    observation_id: str | None = None
    awaiting_step: int | None = None  # the loop's step index whose observation this waits for


@dataclass
class Turn:
    reply: PromptMessage
    results: list[Result]


@dataclass
class Thread:
    hypothesis_id: str
    turns: list[Turn] = field(default_factory=list)

    def settle(self, step_index: int, observation_id: str | None) -> None:
        for turn in self.turns:
            for r in turn.results:
                if r.awaiting_step == step_index:
                    r.observation_id, r.awaiting_step = observation_id, None

    def calls(self) -> list[str]:
        return [r.observation_id for t in self.turns for r in t.results if r.observation_id]


def prompt_tokens(messages: Sequence[PromptMessage], tools: Sequence[ToolSchema] = ()) -> int:
    """What the server will count, estimated so as not to fall short (JSON included)."""
    text = json.dumps([wire_message(m) for m in messages]) + (json.dumps(list(tools)) if tools else "")
    return estimate_tokens(text, chars_per_token=CONSERVATIVE)


@dataclass(frozen=True)
class Renderer:
    prompts: Prompts
    mode: str  # "tools" or "text"
    observation_cap: int

    def _result_text(
        self, result: Result, observations: Mapping[str, Observation], *, short: bool, status: str | None
    ) -> str:
        parts = []
        obs = observations.get(result.observation_id or "")
        if obs is not None:
            block = observation_block(obs, max_tokens=self.observation_cap, short=short)
            parts.append(
                self.prompts.render("observation", observation_id=obs.id, call=obs.action.key(), observation=block)
            )
        elif result.awaiting_step is not None:
            parts.append("(not run)")
        parts.extend(result.notes)
        if status:
            parts.append(status)
        return "\n".join(parts) or "ok"

    def turn_messages(
        self, turn: Turn, observations: Mapping[str, Observation], *, short: bool, status: str | None
    ) -> list[PromptMessage]:
        out = [turn.reply]
        if self.mode != "tools" and turn.reply.tool_calls:  # a turn from before a switch to the text format
            actions = "\n".join(f"Action: {c.name}{c.arguments}" for c in turn.reply.tool_calls)
            out = [PromptMessage(role="assistant", content=f"{turn.reply.content or ''}\n{actions}".strip())]
        if self.mode == "tools" and turn.reply.tool_calls:
            by_id = {r.call_id: r for r in turn.results}
            last = turn.reply.tool_calls[-1].id
            for call in turn.reply.tool_calls:
                result = by_id.get(call.id, Result(call_id=call.id))
                text = self._result_text(result, observations, short=short, status=status if call.id == last else None)
                out.append(PromptMessage(role="tool", tool_call_id=call.id, content=text))
            return out
        texts = [self._result_text(r, observations, short=short, status=None) for r in turn.results]
        if status:
            texts.append(status)
        out.append(PromptMessage(role="user", content="\n".join(t for t in texts if t and t != "ok") or "ok"))
        return out

    def render(
        self,
        head: list[PromptMessage],
        thread: Thread,
        observations: Mapping[str, Observation],
        *,
        status: str,
        tail: list[PromptMessage],
        tools: Sequence[ToolSchema],
        limit: int,
        keep_full: int = 2,
    ) -> list[PromptMessage]:
        """The messages, compacted until they fit ``limit`` tokens: older turns shortened, then dropped."""
        turns = thread.turns
        n = len(turns)
        for dropped in range(0, n + 1):
            for shortened in range(0, max(n - dropped - keep_full, 0) + 1):
                body: list[PromptMessage] = []
                for i, turn in enumerate(turns[dropped:], start=dropped):
                    short = i < dropped + shortened
                    body.extend(
                        self.turn_messages(turn, observations, short=short, status=status if i == n - 1 else None)
                    )
                messages = merged(self._with_note(head, turns[:dropped], observations) + body + tail)
                if prompt_tokens(messages, tools) <= limit:
                    return messages
        return merged(self._with_note(head, turns, observations) + tail)

    def _with_note(
        self, head: list[PromptMessage], dropped: list[Turn], observations: Mapping[str, Observation]
    ) -> list[PromptMessage]:
        if not dropped:
            return list(head)
        calls = [
            f"{observations[r.observation_id].action.key()} -> {r.observation_id}"
            for t in dropped
            for r in t.results
            if r.observation_id is not None and r.observation_id in observations
        ]
        note = self.prompts.render("compacted", count=len(dropped), calls="; ".join(calls) or "none")
        last = head[-1]
        return [*head[:-1], last.model_copy(update={"content": f"{last.content}\n\n{note}"})]


def merged(messages: list[PromptMessage]) -> list[PromptMessage]:
    """Consecutive user messages as one: some chat templates insist that roles alternate."""
    out: list[PromptMessage] = []
    for m in messages:
        if out and m.role == "user" and out[-1].role == "user":
            out[-1] = out[-1].model_copy(update={"content": f"{out[-1].content}\n\n{m.content}"})
        else:
            out.append(m)
    return out
