"""Configuration and the command line: LLM settings from the file and the environment, the key only
from the environment, the reasoner builder, and ``opsagent prompts`` on a saved report."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from opsagent.cli.prompts import register
from opsagent.errors import ConfigError
from opsagent.llm import LLMReasoner, ModelConfigError
from opsagent.llm.cli import build_reasoner
from opsagent.pipeline import investigate_fixture
from opsagent.report import model_summary as summary_line
from opsagent.report import render, to_markdown
from opsagent.settings import load_settings
from tests.conftest import ORDER_INCIDENT
from tests.llm_support import PLAYBOOKS

KEY = "sk-live-Qz7Wx6Ec5Rv4Tb3Yn2Um1Ik0"


def write_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    path = tmp_path / "opsagent.yaml"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setenv("OPSAGENT_CONFIG", str(path))


def test_llm_settings_from_the_file_and_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(
        tmp_path,
        monkeypatch,
        "llm:\n  base_url: http://vllm.internal:8000/v1\n  model: qwen2.5-7b-instruct\n  redact_emails: true\n"
        "  prices:\n    qwen2.5-7b-instruct: {input_per_mtok: 0.1, output_per_mtok: 0.3}\n",
    )
    monkeypatch.setenv("OPSAGENT_LLM__MAX_TOKENS", "512")
    monkeypatch.setenv("OPSAGENT_LLM_API_KEY", KEY)
    settings = load_settings()
    assert settings.llm.model == "qwen2.5-7b-instruct" and settings.llm.max_tokens == 512
    assert settings.llm.prices["qwen2.5-7b-instruct"].output_per_mtok == 0.3
    assert settings.llm_api_key is not None and settings.llm_api_key.get_secret_value() == KEY
    assert KEY not in repr(settings) and KEY not in settings.model_dump_json()


@pytest.mark.parametrize("text", [f"llm_api_key: {KEY}\n", f"llm:\n  model: m\n  api_key: {KEY}\n"])
def test_the_key_is_refused_in_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    write_config(tmp_path, monkeypatch, text)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "OPSAGENT_LLM_API_KEY" in str(info.value) and KEY not in str(info.value)


def test_build_reasoner_flags_win_and_a_model_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPSAGENT_LLM_API_KEY", KEY)
    settings = load_settings()
    with pytest.raises(ModelConfigError, match="no model named"):
        build_reasoner(settings, PLAYBOOKS)
    r = build_reasoner(settings, PLAYBOOKS, model="llama3.1:8b", base_url="http://127.0.0.1:11434/v1", mode="text")
    assert isinstance(r, LLMReasoner) and r.client.model == "llama3.1:8b" and r.mode == "text"
    assert r.client.api_key is not None and r.client.api_key.get_secret_value() == KEY
    with pytest.raises(ModelConfigError):
        build_reasoner(settings, PLAYBOOKS, model="m", mode="telepathy")


def test_the_fake_model_for_demos_needs_no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    r = build_reasoner(load_settings(), PLAYBOOKS, base_url="fake://follow-hints")
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, reasoner=r))
    assert report.root_cause is not None and report.root_cause.kind == "config_change"
    line = summary_line(report)
    assert line is not None and "model follow-hints" in line and "no price for this model" in line
    # the model's part is in every form of the report, not only in JSON
    assert f"## Model\n\n{line}" in to_markdown(report)
    console = Console(record=True, width=400)
    render(report, console)
    assert "model follow-hints" in console.export_text()
    assert "model follow-hints" not in to_markdown(report.model_copy(update={"llm": None}))
    with pytest.raises(ModelConfigError, match="no fake model"):
        build_reasoner(load_settings(), PLAYBOOKS, base_url="fake://oracle")


def test_prompts_command_shows_a_saved_reports_exchanges(tmp_path: Path) -> None:
    r = build_reasoner(load_settings(), PLAYBOOKS, base_url="fake://follow-hints", mode="text")
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, reasoner=r))
    saved = tmp_path / "report.json"
    saved.write_text(report.model_dump_json(), encoding="utf-8")
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        pass

    register(app)
    runner = CliRunner()
    result = runner.invoke(app, ["prompts", str(saved), "--purpose", "reflect", "--full"])
    assert result.exit_code == 0, result.output
    assert "Task: reflect" in result.output and "db-pool-exhaustion@order-service" in result.output
    assert "Task: verify" not in result.output
    bad = runner.invoke(app, ["prompts", str(tmp_path / "missing.json")])
    assert bad.exit_code == 2
