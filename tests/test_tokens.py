"""One token estimator for the whole project: observations, thoughts, log summaries, prompts and the
scripted models' usage are all counted by opsagent.tokens, so every strategy's tokens compare."""

from __future__ import annotations

import ast
import asyncio
import json

from opsagent.llm.client import wire_message
from opsagent.llm.conversation import prompt_tokens
from opsagent.models import PromptMessage
from opsagent.pipeline import investigate_fixture
from opsagent.tokens import CONSERVATIVE, chars_for, estimate_tokens
from tests.conftest import ORDER_INCIDENT, ROOT


def test_an_estimate_rounds_up_and_is_never_zero() -> None:
    assert estimate_tokens("") == 1
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("abcdef", chars_per_token=CONSERVATIVE) == 2
    assert estimate_tokens("x" * chars_for(50)) == 50


def test_a_prompt_is_estimated_conservatively_by_the_same_estimator() -> None:
    messages = [PromptMessage(role="user", content='Task: verify {"component": "order-service"} ' * 20)]
    text = json.dumps([wire_message(m) for m in messages])
    assert prompt_tokens(messages) == estimate_tokens(text, chars_per_token=CONSERVATIVE)
    assert prompt_tokens(messages) > estimate_tokens(text)


def test_every_observation_and_the_meter_count_with_the_estimator() -> None:
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, strategy_name="react"))
    assert report.observations
    for obs in report.observations:
        assert obs.tokens == estimate_tokens(obs.text), obs.id
    thoughts = sum(s.tokens for r in report.results for s in r.steps)
    assert report.cost.tokens >= thoughts > 0


def test_no_other_module_defines_a_token_estimate() -> None:
    """A second estimator is how counts drift apart: only opsagent/tokens.py may define one."""
    offenders = []
    for path in sorted((ROOT / "opsagent").rglob("*.py")):
        if path == ROOT / "opsagent" / "tokens.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name in ("estimate_tokens", "count_tokens"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            imported = isinstance(node, ast.ImportFrom) and any(a.name == "estimate_tokens" for a in node.names)
            if imported and node.module != "opsagent.tokens":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports it from {node.module}")
    assert offenders == []
