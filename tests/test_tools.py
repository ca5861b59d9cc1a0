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


def _rollout_toolbox(**override: object) -> Toolbox:
    from opsagent.fixtures import load
    from opsagent.incident import open_incident
    from opsagent.sources.replay import replay_sources
    from tests.conftest import INCIDENTS

    recording, _ = load(INCIDENTS / "cart-rollout-beside-clean-search")
    sources = replay_sources(recording, default_catalog())
    for kind, source in override.items():
        setattr(sources, kind, source)
    found = open_incident(recording.alert, window=recording.window, baseline=recording.baseline, id="i")
    return Toolbox(sources=sources, catalog=default_catalog(), incident=found, timeout_s=2.0)


def test_the_version_comparison_reads_the_rollout_and_is_evidence_of_its_own_kind() -> None:
    from opsagent.models import ChangesData, SourceKind, VersionsData

    box = _rollout_toolbox()
    obs = asyncio.run(box.call(Action(tool="metrics.versions", args={"service": "cart-service"})))
    assert obs.source == SourceKind.versions and isinstance(obs.data, VersionsData)
    assert obs.data.change_id == "roll-cart-630" and obs.data.verdict == "worse"
    # the rollout came from a call of its own, kept among the observations like any other
    (asked,) = [o for o in box.observations.values() if isinstance(o.data, ChangesData)]
    assert asked.action.args == {"service": "cart-service", "before_min": 60} and box.calls == 2


def test_with_the_change_source_dead_versions_are_told_apart_by_their_labels() -> None:
    from opsagent.models import VersionsData

    box = _rollout_toolbox(changes=BuggyChanges())
    obs = asyncio.run(box.call(Action(tool="metrics.versions", args={"service": "cart-service"})))
    assert isinstance(obs.data, VersionsData) and obs.data.verdict == "worse" and obs.data.change_id is None
    assert "changes:buggy" in box.unreadable  # the source it could not read is named
