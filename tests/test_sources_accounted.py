"""Every source instance is accounted for, and the wall-clock budget covers the whole
investigation: the report names each instance that failed, with its reason, whether or not another
of its kind answered; a source that accepts and never answers costs no more than the budget, and
the time the report states is the time the investigation took."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from opsagent.calls import tool_call
from opsagent.catalog import default_catalog
from opsagent.cli import app
from opsagent.errors import SourceUnavailable
from opsagent.fixtures import MetricSeries
from opsagent.incident import open_incident
from opsagent.models import Action, Alert, ErrorData
from opsagent.sources.live import MetricsFanOut
from opsagent.tools import BUDGET_SPENT, Sources, Toolbox
from tests.conftest import ORDER_INCIDENT
from tests.service_support import free_port
from tests.upstreams import empty_prometheus, silent_listener

runner = CliRunner()


def _alert() -> Alert:
    return Alert.model_validate(yaml.safe_load((ORDER_INCIDENT / "incident.yaml").read_text())["alert"])


def _alert_file(tmp_path: Path) -> Path:
    path = tmp_path / "alert.yaml"
    path.write_text(yaml.safe_dump(yaml.safe_load((ORDER_INCIDENT / "incident.yaml").read_text())["alert"]))
    return path


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "opsagent.yaml"
    monkeypatch.setenv("OPSAGENT_CONFIG", str(path))
    yield path


def _prometheus(config: Path, *urls: tuple[str, str], **extra: object) -> None:
    sources = [{"name": name, "url": url, **extra} for name, url in urls]
    config.write_text(yaml.safe_dump({"sources": {"prometheus": sources}}))


def test_two_dead_prometheus_are_both_named_with_their_reasons(config: Path, tmp_path: Path) -> None:
    _prometheus(config, ("east", f"http://127.0.0.1:{free_port()}"), ("west", f"http://127.0.0.1:{free_port()}"))
    out = tmp_path / "report.md"
    result = runner.invoke(app, ["investigate", str(_alert_file(tmp_path)), "--json", "--markdown", str(out)])
    assert result.exit_code == 3, result.output  # inconclusive: nothing could be read
    unreadable = json.loads(result.stdout)["unreadable_sources"]
    assert "Connection refused" in unreadable["metrics:east"] and "Connection refused" in unreadable["metrics:west"]
    assert "metrics:east+west" not in unreadable  # the instances, not the pair
    markdown = out.read_text()
    assert "metrics:east" in markdown and "metrics:west" in markdown


def test_an_instance_that_fails_while_another_answers_is_named_too(config: Path, tmp_path: Path) -> None:
    with empty_prometheus() as alive:
        _prometheus(config, ("alive", alive), ("dead", f"http://127.0.0.1:{free_port()}"))
        result = runner.invoke(app, ["investigate", str(_alert_file(tmp_path)), "--json"])
    assert result.exit_code == 3, result.output  # inconclusive: nothing could be read
    report = json.loads(result.stdout)
    unreadable = report["unreadable_sources"]
    assert "Connection refused" in unreadable["metrics:dead"]
    assert "metrics:alive" not in unreadable and "metrics" not in unreadable  # the other one answered
    assert report["cost"]["tool_calls"] > 0


class _Reader:
    def __init__(self, name: str, fail: bool) -> None:
        self.name = f"metrics:{name}"
        self.fail = fail

    async def series(self, *, query: str, start: float, end: float) -> list[MetricSeries]:
        if self.fail:
            raise SourceUnavailable("connection refused", source=self.name)
        return [MetricSeries(labels={"__name__": "up", "service": "a"}, samples=[(start, 1.0)])]

    async def everything(self, *, start: float, end: float) -> list[MetricSeries]:
        return await self.series(query="", start=start, end=end)


def test_a_fan_out_puts_partial_failures_in_the_call_ledger_and_names_every_instance_when_all_fail() -> None:
    async def go() -> None:
        mixed = MetricsFanOut([_Reader("a", fail=False), _Reader("b", fail=True)])
        with tool_call(seconds=5) as ledger:
            found = await mixed.series(query="up", start=0, end=60)
        assert len(found) == 1 and [f.source for f in ledger] == ["metrics:b"]
        dead = MetricsFanOut([_Reader("a", fail=True), _Reader("b", fail=True)])
        with pytest.raises(SourceUnavailable) as failed:
            await dead.series(query="up", start=0, end=60)
        assert [f.source for f in failed.value.instances] == ["metrics:a", "metrics:b"]
        assert "metrics:a" in str(failed.value) and "metrics:b" in str(failed.value)

    asyncio.run(go())


# ---------------------------------------------------------------- the wall-clock budget


class _Hangs:
    name = "metrics:hangs"

    def __init__(self) -> None:
        self.calls = 0

    async def stats(self, **_: object) -> None:
        self.calls += 1
        await asyncio.sleep(3600)

    async def scan(self, **_: object) -> list[object]:
        self.calls += 1
        await asyncio.sleep(3600)
        return []


def _toolbox(source: _Hangs, remaining: float) -> Toolbox:
    incident = open_incident(_alert())
    left = time.monotonic() + remaining
    return Toolbox(
        sources=Sources(metrics=source),  # type: ignore[arg-type]
        catalog=default_catalog(),
        incident=incident,
        timeout_s=3.0,
        remaining=lambda: left - time.monotonic(),
    )


def test_a_call_gets_no_more_time_than_the_budget_has_left_and_none_once_it_is_spent() -> None:
    async def go() -> None:
        source = _Hangs()
        toolbox = _toolbox(source, remaining=0.3)
        started = time.monotonic()
        obs = await toolbox.call(Action(tool="metrics.scan"))
        assert time.monotonic() - started < 1.0  # not the 3 s per-call timeout
        assert isinstance(obs.data, ErrorData) and "wall-clock budget" in obs.data.error
        assert "wall-clock budget" in toolbox.unreadable["metrics:hangs"]
        spent = _toolbox(source, remaining=0.0)
        calls = source.calls
        late = await spent.call(Action(tool="metrics.signal", args={"signal": "latency_p99", "service": "x"}))
        assert isinstance(late.data, ErrorData) and late.data.error == BUDGET_SPENT
        assert source.calls == calls and spent.calls == 0  # not even asked

    asyncio.run(go())


def test_a_listener_that_never_answers_costs_the_budget_and_the_report_states_what_it_took(
    config: Path, tmp_path: Path
) -> None:
    with silent_listener() as url:
        # the client's own timeout (10 s) is longer than the budget: the budget must win
        _prometheus(config, ("main", url), timeout_s=10)
        started = time.monotonic()
        result = runner.invoke(app, ["investigate", str(_alert_file(tmp_path)), "--json", "--wall-s", "4"])
        took = time.monotonic() - started
    assert result.exit_code == 3, result.output  # inconclusive: nothing could be read
    report = json.loads(result.stdout)
    stated = report["cost"]["wall_ms"] / 1000
    assert stated <= 4.5, stated
    assert took - stated < 1.0, (took, stated)  # loading playbooks and printing: not a thread left waiting
    assert "no answer" in report["unreadable_sources"]["metrics:main"]
    assert report["status"] == "inconclusive"
