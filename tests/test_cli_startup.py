"""Start-up: ``opsagent --help`` imports typer and nothing of the engine; investigating or replaying a
recording imports neither SciPy nor the live adapters, and with the playbook reasoner no LLM client. Each case runs in a fresh interpreter (this
test process has imported everything already) and reads that interpreter's ``sys.modules``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.core import TyperCommand

from opsagent.cli import COMMANDS, load_command
from tests.conftest import ORDER_INCIDENT

#: What the live sources, the service and the version comparison pull in: none of it is needed to
#: print help or to replay a recording.
LIVE_ONLY = (
    "scipy",
    "elasticsearch",
    "elastic_transport",
    "aiohttp",
    "kr8s",
    "prometheus_api_client",
    "uvicorn",
    "fastapi",
    "adapters.alertmanager.client",
    "adapters.config",
    "opsagent.sources.live",
    "adapters.elasticsearch.reader",
    "adapters.kubernetes.reader",
)

#: What only the LLM reasoner needs: its HTTP client and retries. The playbook reasoner (the default)
#: investigates without them.
LLM_ONLY = ("httpx", "tenacity", "opsagent.llm.client", "opsagent.llm.reasoner")

PROBE = """
import json, sys
sys.argv = ["opsagent", *json.loads(sys.argv[1])]
try:
    from opsagent.cli import app
    app()
except SystemExit:
    pass
finally:
    sys.stderr.write("\\nMODULES " + json.dumps(sorted(sys.modules)) + "\\n")
"""


def modules_after(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(args))], capture_output=True, text=True, timeout=300, check=False
    )
    line = next(x for x in done.stderr.splitlines() if x.startswith("MODULES "))
    return set(json.loads(line.removeprefix("MODULES ")))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules for n in names if m == n or m.startswith(n + "."))


def test_help_imports_typer_and_none_of_the_engine() -> None:
    modules = modules_after("--help")
    assert loaded(modules, LIVE_ONLY) == []
    engine = ("pydantic", "rich", "structlog", "yaml", "httpx", "numpy", "opsagent.models", "opsagent.pipeline")
    assert loaded(modules, engine) == []
    commands = sorted({f"opsagent.cli.{module}" for module, _ in COMMANDS.values()})
    assert loaded(modules, tuple(commands)) == []


@pytest.mark.parametrize(
    "args",
    [("investigate", str(ORDER_INCIDENT), "--json", "--no-lessons"), ("replay", str(ORDER_INCIDENT), "--json")],
    ids=["investigate", "replay"],
)
def test_a_recording_is_investigated_without_the_live_adapters(args: tuple[str, ...]) -> None:
    modules = modules_after(*args)
    assert "opsagent.pipeline" in modules  # it did investigate
    assert loaded(modules, LIVE_ONLY) == []
    assert loaded(modules, LLM_ONLY) == []


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_listing_shows_each_commands_own_help(name: str) -> None:
    real = load_command(name)
    listed = TyperCommand(name=name, help=COMMANDS[name][1])
    assert listed.get_short_help_str(200) == real.get_short_help_str(200)
    assert real.name == name
