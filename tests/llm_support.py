"""Shared setup for the LLM reasoner's tests: a reasoner over a fake or respx-mocked endpoint,
recorded exchanges, and copies of the order-service incident with planted log lines or changes."""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx

from opsagent.llm import ChatClient, FunctionModel, LLMReasoner
from opsagent.loop import Budget
from opsagent.models import Report
from opsagent.pipeline import investigate_fixture
from opsagent.plan import load_default_playbooks
from opsagent.settings import LLMSettings
from tests.conftest import ORDER_INCIDENT

BASE_URL = "http://llm.test/v1"
ENDPOINT = BASE_URL + "/chat/completions"
RECORDINGS = Path(__file__).resolve().parent / "llm_recordings"
PLAYBOOKS = load_default_playbooks()


async def no_sleep(seconds: float) -> None:
    return None


def reasoner(
    model: FunctionModel | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    **settings: Any,
) -> LLMReasoner:
    """An LLM reasoner; through ``model``'s transport, or whatever respx mocks when there is none."""
    llm = LLMSettings(model=settings.pop("model_name", "test-model"), base_url=BASE_URL, **settings)
    client = ChatClient.from_settings(
        llm, transport=transport or (model.transport() if model is not None else None), sleep=no_sleep
    )
    return LLMReasoner(client=client, playbooks=PLAYBOOKS, settings=llm)


def investigate(
    r: LLMReasoner, path: Path = ORDER_INCIDENT, *, strategy: str = "hybrid", budget: Budget | None = None
) -> Report:
    report, _ = asyncio.run(investigate_fixture(path, reasoner=r, strategy_name=strategy, budget=budget))
    return report


def recording(variant: str) -> list[dict[str, Any]]:
    doc = json.loads((RECORDINGS / f"{ORDER_INCIDENT.name}.{variant}.json").read_text(encoding="utf-8"))
    exchanges: list[dict[str, Any]] = doc["exchanges"]
    return exchanges


def incident_copy(
    tmp_path: Path,
    *,
    log_lines: Iterable[dict[str, Any]] = (),
    changes: Iterable[dict[str, Any]] = (),
    summary: str | None = None,
) -> Path:
    """The order-service incident with extra log lines, changes, or another alert summary."""
    target = tmp_path / ORDER_INCIDENT.name
    shutil.copytree(ORDER_INCIDENT, target)
    logs = target / "logs.jsonl.gz"
    lines = gzip.decompress(logs.read_bytes()).decode().splitlines()
    lines.extend(json.dumps(line) for line in log_lines)
    logs.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    with (target / "changes.jsonl").open("a", encoding="utf-8") as fh:
        for change in changes:
            fh.write(json.dumps(change) + "\n")
    if summary is not None:
        yaml_text = (target / "incident.yaml").read_text(encoding="utf-8")
        yaml_text = yaml_text.replace("summary: order-service p99 latency 2.25s", f"summary: {json.dumps(summary)}")
        (target / "incident.yaml").write_text(yaml_text, encoding="utf-8")
    return target
