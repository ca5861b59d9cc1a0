"""The budgeted ReAct loop: budgets enforced by the loop, malformed actions, dead sources."""

import asyncio
import json
from typing import Any

from opsagent.catalog import default_catalog
from opsagent.fixtures import load
from opsagent.loop import Budget, Meter, WorkClock, verify
from opsagent.models import Action, Hypothesis, Report, SourceKind, StopReason
from opsagent.pipeline import investigate, investigate_fixture
from opsagent.plan import Planner, Reading
from opsagent.reasoner import Decision, ScriptedReasoner
from opsagent.sources import Sources
from opsagent.sources.replay import replay_sources
from opsagent.tools import Toolbox
from tests.conftest import ORDER_INCIDENT
from tests.fakes import DeadLogs, FakeMetrics, HangingTraces, alert, incident, stats

HYPOTHESIS = Hypothesis(
    id="h1",
    component="checkout",
    kind="cpu_saturation",
    statement="checkout is CPU-bound",
    confirm_if=[],
    refute_if=[],
    prior=0.3,
    score=0.3,
)


def test_one_step_budget_ends_inconclusive_with_budget_exhausted() -> None:
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, budget=Budget(max_steps=1)))
    assert report.status == "inconclusive"
    assert report.root_cause is None
    assert all(len(r.steps) <= 1 for r in report.results)
    assert any(r.stop_reason is StopReason.steps and r.stop_reason.budget for r in report.results)
    assert any(r.stop_detail == "budget exhausted: 1 steps" for r in report.results)
    assert report.budget_exhausted == "budget exhausted: 1 steps"
    assert report.statement.startswith("inconclusive — needs a human")


def test_token_budget_is_counted_from_observations_not_steps() -> None:
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, budget=Budget(token_budget=50)))
    assert report.budget_exhausted == "budget exhausted: 50 tokens"
    assert report.status == "inconclusive" and "Stopped early: budget exhausted: 50 tokens" in report.statement
    assert report.cost.tokens >= 50


def test_wall_clock_cap_is_enforced_by_the_loop_in_a_live_investigation() -> None:
    now = iter(range(0, 10_000, 30))  # every look at the clock advances 30 s

    def clock() -> float:
        return float(next(now))

    recording, _ = load(ORDER_INCIDENT)
    catalog = default_catalog().merged(recording.signals)
    report = asyncio.run(
        investigate(  # sources investigated as live ones are: no work clock, the wall clock counts
            Planner.shipped(budget=Budget(wall_s=60)).plan(
                Reading(
                    name="live",
                    alert=recording.alert,
                    sources=replay_sources(recording, catalog),
                    catalog=catalog,
                    recording=recording,
                )
            ),
            clock=clock,
        )
    )
    assert report.status == "inconclusive"
    assert report.budget_exhausted == "budget exhausted: 60 s wall clock"


def _without_wall_time(report: Report) -> str:
    data = report.model_dump(mode="json")
    data["cost"].pop("wall_ms")
    return json.dumps(data, sort_keys=True)


def test_a_replay_gives_the_same_report_however_slow_the_machine_is() -> None:
    quiet, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT))
    now = iter(range(0, 10_000_000, 30))  # a machine so busy that every look at the clock is 30 s later
    busy, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, clock=lambda: float(next(now))))
    assert quiet.status == "confirmed" and quiet.budget_exhausted is None
    assert _without_wall_time(busy) == _without_wall_time(quiet)


def test_a_replays_wall_clock_budget_counts_tool_calls_not_seconds() -> None:
    now = iter(range(0, 10_000_000, 30))
    first, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, budget=Budget(wall_s=4)))
    again, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, budget=Budget(wall_s=4), clock=lambda: float(next(now))))
    assert first.budget_exhausted == "budget exhausted: 4 s wall clock (replay: 0.5 s a tool call)"
    # 4 s at 0.5 s a call is 8 calls, wherever the machine's time went: the onset's look at the
    # alerting signal, and 7 the report counts
    assert first.cost.tool_calls == 7
    assert _without_wall_time(again) == _without_wall_time(first)


def test_a_replay_source_is_never_timed_out() -> None:
    """A replay source computes from the recording: however long that takes on a busy machine, it
    answers (a live source's per-call timeout is the incident's business; a replay's is not)."""

    class SlowReplayMetrics(FakeMetrics):
        async def stats(self, **kwargs: Any) -> Any:
            await asyncio.sleep(0.05)  # longer than the per-call timeout below
            return await super().stats(**kwargs)

    metrics = SlowReplayMetrics(
        {("cpu_usage", "checkout"): stats("cpu_usage", "checkout", base=0.3, window=0.95, limit=1.0)}
    )
    action = Action(tool="metrics.signal", args={"signal": "cpu_usage", "service": "checkout"})

    async def call(work: WorkClock | None) -> Any:
        toolbox = Toolbox(
            sources=Sources(metrics=metrics), catalog=default_catalog(), incident=incident(), timeout_s=0.001, work=work
        )
        return await toolbox.call(action)

    assert asyncio.run(call(WorkClock())).source is SourceKind.metrics
    assert "stats" in asyncio.run(call(WorkClock())).data.model_dump()
    live = asyncio.run(call(None))  # the same source, live: held to its timeout
    assert "no answer within" in live.data.model_dump()["error"]


def test_malformed_actions_become_observations_and_the_loop_goes_on() -> None:
    metrics = FakeMetrics({("cpu_usage", "checkout"): stats("cpu_usage", "checkout", base=0.3, window=0.95, limit=1.0)})
    reasoner = ScriptedReasoner(
        decisions=[
            Decision(
                thought="try a tool that does not exist", action=Action(tool="shell.exec", args={"cmd": "reboot"})
            ),
            Decision(
                thought="now read the CPU",
                action=Action(tool="metrics.signal", args={"signal": "cpu_usage", "service": "checkout"}),
            ),
            Decision(thought="done", action=None),
        ]
    )
    box = Toolbox(sources=Sources(metrics=metrics), catalog=default_catalog(), incident=incident())
    result = asyncio.run(
        verify(
            HYPOTHESIS,
            incident=incident(),
            reasoner=reasoner,
            toolbox=box,
            meter=Meter(budget=Budget()),
            available={SourceKind.metrics},
        )
    )
    first = box.observations[result.steps[0].observation_id or ""]
    assert not first.ok and "format error" in first.text and "metrics.signal" in first.text
    assert len(result.steps) == 2 and metrics.calls == 1
    assert result.stop_reason is StopReason.no_checks_left and result.verdict.status == "inconclusive"
    assert result.verdict.reason == "no checks left"


def test_evidence_citing_missing_observations_does_not_count() -> None:
    from opsagent.models import Evidence

    forged = [
        Evidence(observation_id="m-000000", source=SourceKind.metrics, stance="supports", statement="trust me"),
        Evidence(observation_id="t-000000", source=SourceKind.traces, stance="supports", statement="me too"),
    ]
    reasoner = ScriptedReasoner(decisions=[Decision(thought="I am sure", action=None, evidence=forged)])
    box = Toolbox(sources=Sources(), catalog=default_catalog(), incident=incident())
    result = asyncio.run(
        verify(
            HYPOTHESIS,
            incident=incident(),
            reasoner=reasoner,
            toolbox=box,
            meter=Meter(budget=Budget()),
            available={SourceKind.metrics, SourceKind.traces},
        )
    )
    assert result.verdict.status == "inconclusive"


def test_hypotheses_are_verified_concurrently() -> None:
    started: list[str] = []
    release = asyncio.Event()

    async def script(inc, hypothesis, steps, observations):  # type: ignore[no-untyped-def]
        started.append(hypothesis.id)
        if len(started) < 2:
            await asyncio.wait_for(release.wait(), timeout=2)
        release.set()
        return Decision(thought="stop", action=None)

    reasoner = ScriptedReasoner(script=script)
    box = Toolbox(sources=Sources(), catalog=default_catalog(), incident=incident())
    meter = Meter(budget=Budget())

    async def both() -> None:
        await asyncio.gather(
            *(
                verify(
                    HYPOTHESIS.model_copy(update={"id": hid}),
                    incident=incident(),
                    reasoner=reasoner,
                    toolbox=box,
                    meter=meter,
                    available=set(),
                )
                for hid in ("a", "b")
            )
        )

    asyncio.run(both())  # would time out if the second loop only started after the first ended
    assert sorted(started) == ["a", "b"]


def test_an_investigation_with_dead_sources_finishes_and_names_them() -> None:
    recording, _ = load(ORDER_INCIDENT)
    catalog = default_catalog().merged(recording.signals)
    sources = replay_sources(recording, catalog)
    sources = Sources(metrics=sources.metrics, logs=DeadLogs(), changes=sources.changes, traces=HangingTraces())
    report = asyncio.run(
        investigate(
            Planner.shipped(budget=Budget(timeout_s=0.2)).plan(
                Reading(
                    name="live",
                    alert=recording.alert,
                    sources=sources,
                    catalog=catalog,
                    topology=recording.topology,
                    recording=recording,
                )
            )
        )
    )
    assert "logs:dead" in report.unreadable_sources and "traces:hanging" in report.unreadable_sources
    assert report.suspects and report.suspects[0].component == "order-service"


def test_an_alert_with_no_sources_at_all_still_reports() -> None:
    report = asyncio.run(
        investigate(
            Planner.shipped().plan(Reading(name="none", alert=alert(), sources=Sources(), catalog=default_catalog()))
        )
    )
    assert report.status == "inconclusive"
    assert set(report.unreadable_sources) == {"metrics", "logs", "changes", "traces"}
