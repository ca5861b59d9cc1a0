"""Prompts are package data (``data/prompts.yaml``), loaded once and validated into a model.

Validation is what a broken playbook gets: a template with a placeholder nobody fills, or without
one it needs, is a :class:`PromptError` naming the file and the template, at load time rather than
mid-investigation.
"""

from __future__ import annotations

import string
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from opsagent.errors import ConfigError

#: Per template: (placeholders it must use, placeholders it may use).
PLACEHOLDERS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "system": (frozenset(), frozenset()),
    "propose": (
        frozenset({"incident", "triage", "candidates", "k", "schema", "kinds", "components"}),
        frozenset({"lessons", "logs"}),
    ),
    "repair": (frozenset({"problems"}), frozenset()),
    "act_tools": (frozenset({"hypothesis_id", "hypothesis", "checks"}), frozenset({"incident", "max_steps"})),
    "act_text": (frozenset({"hypothesis_id", "hypothesis", "checks", "usage"}), frozenset({"incident", "max_steps"})),
    "observation": (frozenset({"observation_id", "observation"}), frozenset({"call"})),
    "turn_status": (frozenset({"counted", "steps_left"}), frozenset({"hypothesis_id"})),
    "format_error": (frozenset({"problems"}), frozenset()),
    "budget_final": (frozenset(), frozenset()),
    "compacted": (frozenset({"count"}), frozenset({"calls"})),
    "reflect": (
        frozenset({"hypothesis_id", "hypothesis", "refuting", "schema", "usage"}),
        frozenset({"incident", "calls", "signals"}),
    ),
}


class PromptError(ConfigError):
    pass


def fields_of(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


class Prompts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str
    propose: str
    repair: str
    act_tools: str
    act_text: str
    observation: str
    turn_status: str
    format_error: str
    budget_final: str
    compacted: str
    reflect: str

    @model_validator(mode="after")
    def _placeholders(self) -> Prompts:
        problems = []
        for name, (required, optional) in PLACEHOLDERS.items():
            try:
                used = fields_of(getattr(self, name))
            except ValueError as exc:
                problems.append(f"{name}: {exc}")
                continue
            unknown = used - required - optional
            missing = required - used
            if unknown:
                problems.append(f"{name}: unknown placeholder(s) {', '.join(sorted(unknown))}")
            if missing:
                problems.append(f"{name}: missing placeholder(s) {', '.join(sorted(missing))}")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def render(self, name: str, **values: Any) -> str:
        template: str = getattr(self, name)
        return template.format(**values).strip()


def load_prompts(path: Path | None = None) -> Prompts:
    """The shipped prompts, or a replacement file (same templates, validated the same way)."""
    where = str(path) if path is not None else "opsagent/llm/data/prompts.yaml"
    try:
        if path is None:
            text = resources.files("opsagent.llm").joinpath("data/prompts.yaml").read_text(encoding="utf-8")
        else:
            text = path.read_text(encoding="utf-8")
        raw = yaml.safe_load(text)
    except (OSError, yaml.YAMLError) as exc:
        raise PromptError(f"{where}: cannot read prompts: {exc}") from exc
    try:
        return Prompts.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'prompts'}: {e['msg']}" for e in exc.errors())
        raise PromptError(f"{where}: invalid prompts: {problems}") from exc


@cache
def default_prompts() -> Prompts:
    return load_prompts()
