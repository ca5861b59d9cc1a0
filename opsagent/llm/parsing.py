"""Reading what a model wrote, tolerantly: JSON in prose or fences, ``Thought/Action/Final`` text,
native tool calls. Nothing here raises on bad output: a reply that cannot be read comes back with
``problems`` that go back to the model, and an action naming an unknown tool or bad arguments is
passed on as written, for the toolbox to answer with what is available.

Accepted action forms: ``tool[x]``, ``tool(x)``, ``tool x``, ``tool{"k": "v"}``, ``tool(k=v, k2=v2)``,
and JSON objects (``{"tool": …, "args": …}``, ``{"name": …, "arguments": …}``,
``{"action": …, "action_input": …}``). A bare argument fills the tool's first field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from opsagent.llm.grounding import Claim, Stance
from opsagent.llm.toolschema import CITE, FINAL, CiteArgs, FinalArgs, resolve
from opsagent.models import Action, ArgValue, PromptMessage
from opsagent.tools import TOOLS

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)


def extract_json(text: str) -> tuple[Any, str | None]:
    """The first JSON value in a reply (bare, fenced, or after some prose), or the reason there is none."""
    text = (text or "").strip()
    if not text:
        return None, "the reply was empty"
    candidates = [m.group(1).strip() for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    last_error = "no JSON object found"
    for candidate in candidates:
        try:
            return json.loads(candidate), None
        except json.JSONDecodeError as exc:
            last_error = f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        for start in (i for i, ch in enumerate(candidate) if ch in "{["):
            try:
                value, _ = decoder.raw_decode(candidate[start:])
                return value, None
            except json.JSONDecodeError:
                continue
    return None, last_error


def validation_problems(exc: ValidationError, limit: int = 6) -> str:
    parts = [f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors()[:limit]]
    more = len(exc.errors()) - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


# ---------------------------------------------------------------- actions


def _scalar(raw: str) -> ArgValue:
    value = raw.strip().strip("`").strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() and "." not in value else number


def arg_values(raw: dict[str, Any]) -> dict[str, ArgValue]:
    """JSON arguments as tool arguments: nulls dropped, anything nested kept as JSON text (for the
    toolbox to reject with a usage hint)."""
    out: dict[str, ArgValue] = {}
    for key, value in raw.items():
        if value is None:
            continue
        if isinstance(value, str | bool | int | float):
            out[str(key)] = value
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[str(key)] = list(value)
        else:
            out[str(key)] = json.dumps(value)
    return out


_PAIR = re.compile(r"""\s*([A-Za-z_][\w-]*)\s*[=:]\s*("[^"]*"|'[^']*'|[^,]+)\s*(?:,|$)""")


def parse_args(tool: str, raw: str) -> dict[str, ArgValue]:
    raw = raw.strip()
    if not raw:
        return {}
    value, problem = extract_json(raw) if raw[0] in "{[" else (None, "not JSON")
    if problem is None and isinstance(value, dict):
        return arg_values(value)
    if _PAIR.match(raw):
        pairs = {m.group(1): _scalar(m.group(2)) for m in _PAIR.finditer(raw)}
        if pairs and "".join(m.group(0) for m in _PAIR.finditer(raw)).strip() == raw:
            return pairs
    spec = TOOLS.get(tool)
    positional = [p for p in re.split(r"\s*,\s*", raw) if p]
    if spec is None:
        return {"args": raw}
    names = list(spec.args.model_fields)
    if not names:
        return {"args": raw}
    return {name: _scalar(value) for name, value in zip(names, positional, strict=False)} | (
        {"args": ", ".join(positional[len(names) :])} if len(positional) > len(names) else {}
    )


_ACTION = re.compile(r"^\s*`?([A-Za-z_][\w.\-/]*)`?\s*(.*?)\s*$", re.S)


def parse_action(text: str) -> Action | None:
    text = text.strip().strip("`").strip()
    if not text or text.lower() in ("none", "null", "n/a"):
        return None
    if text[0] == "{":
        value, problem = extract_json(text)
        if problem is None and isinstance(value, dict):
            name = value.get("tool") or value.get("name") or value.get("action")
            args = value.get("args", value.get("arguments", value.get("action_input", {})))
            if isinstance(args, str):
                inner, _ = extract_json(args)
                args = inner if isinstance(inner, dict) else {}
            if isinstance(name, str):
                tool = resolve(name)
                return Action(tool=tool, args=arg_values(args) if isinstance(args, dict) else {})
    match = _ACTION.match(text)
    if match is None:
        return Action(tool=text[:60])
    tool, rest = resolve(match.group(1)), match.group(2)
    if rest[:1] in "[(" and rest[-1:] in "])":
        rest = rest[1:-1]
    return Action(tool=tool, args=parse_args(tool, rest))


# ---------------------------------------------------------------- replies


@dataclass
class Reply:
    """One turn of a model, read: its thought, at most one action, its citations, or its final word."""

    thought: str = ""
    actions: list[tuple[str | None, Action]] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    final: str | None = None
    problems: list[str] = field(default_factory=list)
    call_notes: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.actions and self.final is None and not self.claims


_LABEL = re.compile(
    r"^\s*(?:[*_#>]+\s*)?(thought|action input|action|evidence|final answer|final|observation)"
    r"\s*[*_]*\s*:\s*[*_]*\s*(.*)$",
    re.I,
)
_CLAIM_TEXT = re.compile(r"\b([a-z]-[0-9a-f]{6})\b\W*(supports?|refutes?)\b\W*(.*)", re.I)


def parse_claims(text: str) -> tuple[list[Claim], list[str]]:
    value, problem = extract_json(text)
    items = value if isinstance(value, list) else [value] if isinstance(value, dict) else None
    claims: list[Claim] = []
    if problem is None and items is not None:
        problems = []
        for item in items:
            try:
                claims.append(Claim.model_validate(item))
            except ValidationError as exc:
                problems.append(f"evidence {json.dumps(item)[:80]}: {validation_problems(exc)}")
        return claims, problems
    match = _CLAIM_TEXT.search(text)
    if match:
        stance: Stance = "supports" if match.group(2).lower().startswith("support") else "refutes"
        return [Claim(observation_id=match.group(1), stance=stance, reason=match.group(3).strip())], []
    return [], [f"evidence {text.strip()[:80]!r}: give an observation id and supports or refutes"]


def parse_text(text: str) -> Reply:
    """``Thought: … / Evidence: … / Action: tool[args]`` or ``Final: …``; an Observation the model wrote
    itself, and anything after it, is ignored."""
    reply = Reply()
    sections: list[tuple[str, str]] = []
    for line in (text or "").splitlines():
        match = _LABEL.match(line)
        if match:
            label = match.group(1).lower()
            if label == "observation":
                break
            sections.append((label, match.group(2)))
        elif sections:
            label, body = sections[-1]
            sections[-1] = (label, body + "\n" + line)
        elif line.strip():
            sections.append(("thought", line))
    action_text: str | None = None
    action_input: str | None = None
    for label, body in sections:
        body = body.strip()
        if label == "thought":
            reply.thought = (reply.thought + " " + body).strip()
        elif label == "evidence":
            claims, problems = parse_claims(body)
            reply.claims.extend(claims)
            reply.problems.extend(problems)
        elif label == "action" and action_text is None and reply.final is None:
            action_text = body
        elif label == "action input" and action_input is None:
            action_input = body
        elif label in ("final", "final answer") and reply.final is None and action_text is None:
            reply.final = body or "done"
    if action_text is not None:
        if action_input is not None and not re.search(r"[\[({]", action_text):
            action_text = f"{action_text}({action_input})"
        action = parse_action(action_text)
        if action is not None:
            reply.actions.append((None, action))
        elif reply.final is None:
            reply.final = reply.thought or "no action"
    if reply.empty and not reply.problems:
        reply.problems.append(
            "the reply was empty" if not (text or "").strip() else "it has neither an Action line nor a Final line"
        )
    return reply


def _tool_args(raw: str, model: type[BaseModel]) -> tuple[BaseModel | None, str | None]:
    value, problem = extract_json(raw or "{}")
    if problem is not None or not isinstance(value, dict):
        return None, problem or "arguments must be a JSON object"
    try:
        return model.model_validate(value), None
    except ValidationError as exc:
        return None, validation_problems(exc)


def parse_tool_reply(message: PromptMessage) -> Reply:
    """A reply with native tool calls. With none, its text is read in the text format (servers whose
    tool parser fails hand the call back as text)."""
    if not message.tool_calls:
        reply = parse_text(message.content or "")
        return reply
    reply = Reply(thought=(message.content or "").strip())
    for call in message.tool_calls:
        name = resolve(call.name)
        if name == CITE:
            cite, problem = _tool_args(call.arguments, CiteArgs)
            if isinstance(cite, CiteArgs):
                reply.claims.extend(cite.evidence)
            else:
                reply.problems.append(f"cite_evidence: {problem}")
                reply.call_notes[call.id] = f"not understood: {problem}"
        elif name == FINAL:
            final, problem = _tool_args(call.arguments, FinalArgs)
            if isinstance(final, FinalArgs):
                reply.claims.extend(final.evidence)
                reply.final = final.summary or "done"
            else:
                reply.final = "done"
                reply.call_notes[call.id] = f"arguments not understood ({problem}); taken as final"
        else:
            value, problem = extract_json(call.arguments or "{}")
            if problem is None and isinstance(value, dict):
                args = arg_values(value)
            else:
                args = parse_args(name, call.arguments or "")
            reply.actions.append((call.id, Action(tool=name, args=args)))
    return reply
