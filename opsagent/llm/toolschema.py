"""The tools a model may call, as chat-completions function schemas, generated from the tool layer.

The read-only tools come from :data:`opsagent.tools.TOOLS` (their pydantic argument models give the
JSON Schemas), so a tool added there is offered to models with no change here. Two more functions
are the model's side of the protocol: ``cite_evidence`` and ``final``. Function names cannot hold a
dot, so ``metrics.signal`` is offered as ``metrics_signal`` and mapped back on the way in.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from opsagent.llm.client import ToolSchema
from opsagent.llm.grounding import Claim
from opsagent.tools import TOOLS

CITE = "cite_evidence"
FINAL = "final"


class CiteArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    evidence: list[Claim] = Field(description="observations you have seen that support or refute the hypothesis")


class FinalArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    summary: str = Field(default="", description="one sentence: what you found")
    evidence: list[Claim] = Field(default_factory=list, description="citations not given yet")


class FinalSchema(BaseModel):
    """What ``final`` is offered with; :class:`FinalArgs` also reads citations a model adds to it."""

    summary: str = Field(default="", description="one sentence: what you found")


def function_name(tool: str) -> str:
    return tool.replace(".", "_")


def _squash(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_BY_SQUASHED = {_squash(t): t for t in TOOLS} | {_squash(CITE): CITE, _squash(FINAL): FINAL}


def resolve(name: str) -> str:
    """A tool's real name from how a model wrote it (``metrics_signal``, ``Metrics.Signal``, `` `logs.summary` ``);
    an unknown name comes back as written, so the toolbox can say what is available."""
    cleaned = name.strip().strip("`'\"*").strip()
    return _BY_SQUASHED.get(_squash(cleaned), cleaned)


def clean_schema(schema: Any) -> Any:
    """A JSON Schema as short as it can be and still say the same to a model: no titles, no class
    docstrings, and an optional string as a string (a model should leave it out, not send null)."""
    if isinstance(schema, list):
        return [clean_schema(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: clean_schema(v) for k, v in schema.items() if k != "title"}
    any_of = out.get("anyOf")
    if isinstance(any_of, list) and {"type": "null"} in any_of and len(any_of) == 2:
        out.pop("anyOf")
        out.update(next(s for s in any_of if s != {"type": "null"}))
        if out.get("default") is None:
            out.pop("default", None)
    for sub in out.get("$defs", {}).values():
        sub.pop("description", None)
    return out


def _function(name: str, description: str, model: type[BaseModel]) -> ToolSchema:
    parameters = model.model_json_schema()
    parameters.pop("description", None)
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": clean_schema(parameters)},
    }


def tool_schemas(*, actions: bool = True) -> list[ToolSchema]:
    """The read-only tools (unless ``actions`` is off: the budget is spent), then cite_evidence and final."""
    out = []
    if actions:
        out = [
            _function(function_name(spec.name), f"{spec.doc} (read-only; {spec.kind.value})", spec.args)
            for spec in TOOLS.values()
        ]
    out.append(_function(CITE, "Cite observations you have seen as supporting or refuting the hypothesis.", CiteArgs))
    out.append(_function(FINAL, "Stop verifying this hypothesis: nothing more is worth calling.", FinalSchema))
    return out


def usage_text() -> str:
    return "; ".join(f"{spec.usage()} — {spec.doc}" for spec in TOOLS.values())
