import asyncio

from opsagent.catalog import default_catalog
from opsagent.models import Action, ErrorData, MetricsData
from opsagent.sources import Sources
from opsagent.tools import Toolbox
from tests.fakes import BuggyChanges, DeadLogs, FakeMetrics, HangingTraces, incident, stats


def _toolbox(**sources: object) -> Toolbox:
    return Toolbox(sources=Sources(**sources), catalog=default_catalog(), incident=incident(), timeout_s=0.2)  # type: ignore[arg-type]


def test_identical_calls_are_cached() -> None:
    metrics = FakeMetrics({("cpu_usage", "checkout"): stats("cpu_usage", "checkout", base=0.3, window=0.9)})
    box = _toolbox(metrics=metrics)
    action = Action(tool="metrics.signal", args={"signal": "cpu_usage", "service": "checkout"})

    async def go() -> None:
        first = await box.call(action)
        second = await box.call(action)
        assert first.id == second.id and second.cached
        assert isinstance(first.data, MetricsData) and first.data.stats[0].signal == "cpu_usage"

    asyncio.run(go())
    assert metrics.calls == 1 and box.calls == 1 and box.cache_hits == 1


def test_malformed_action_becomes_a_format_error_observation() -> None:
    box = _toolbox(metrics=FakeMetrics({}))

    async def go() -> None:
        unknown = await box.call(Action(tool="metrics.delete", args={}))
        bad_args = await box.call(Action(tool="metrics.signal", args={"signal": "cpu_usage", "bogus": "1"}))
        for obs in (unknown, bad_args):
            assert isinstance(obs.data, ErrorData)
            assert obs.data.error.startswith("format error")
            assert obs.data.hint
        assert "metrics.signal(signal, service)" in (unknown.data.hint or "")  # type: ignore[union-attr]

    asyncio.run(go())


def test_unknown_signal_is_a_hint_not_a_crash() -> None:
    box = _toolbox(metrics=FakeMetrics({}))
    obs = asyncio.run(box.call(Action(tool="metrics.signal", args={"signal": "vibes", "service": "x"})))
    assert (
        isinstance(obs.data, ErrorData)
        and "unknown signal" in obs.data.error
        and "latency_p99" in (obs.data.hint or "")
    )


def test_failing_sources_are_named_and_do_not_raise() -> None:
    box = _toolbox(logs=DeadLogs(), changes=BuggyChanges(), traces=HangingTraces())

    async def go() -> None:
        for action in (
            Action(tool="logs.summary", args={"service": "checkout"}),
            Action(tool="changes.list", args={}),
            Action(tool="traces.summary", args={}),
            Action(tool="metrics.scan"),
        ):
            obs = await box.call(action)
            assert not obs.ok

    asyncio.run(go())
    assert "connection refused" in box.unreadable["logs:dead"]
    assert "KeyError" in box.unreadable["changes:buggy"]
    assert "0.2 s" in box.unreadable["traces:hanging"]
    assert "no metrics source" in box.unreadable["metrics"]
