"""Reflect: the model writes lessons in the structured form; a lesson that is not concrete is rejected
(opsagent.lessons.problems) and the rule's lesson is kept, with a note in the report."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from opsagent.lessons import problems
from opsagent.llm import FunctionModel, ModelReply, ModelRequest, follow_hints
from opsagent.models import Lesson, Report
from tests.llm_support import investigate, reasoner


def reflecting(lesson: Any) -> FunctionModel:
    def fn(request: ModelRequest) -> ModelReply | str:
        if request.task == "reflect":
            return lesson if isinstance(lesson, str) else json.dumps({"lesson": lesson})
        return follow_hints(request)

    return FunctionModel(fn)


CONCRETE = {
    "condition": "connection timeouts burst while the service's own time rises",
    "signals": ["log:timeout", "trace:self_time_up", "signal:made_up:up"],
    "refuting_evidence": [{"observation_id": "m-d2ae3b", "value": "only 32 of 200 connections in use"}],
    "next_action": {"tool": "metrics_signal", "args": {"signal": "threadpool_queue", "service": "order-service"}},
}


@pytest.fixture(scope="module")
def investigated() -> Report:
    """One investigation whose lesson the model writes (and whose refuted hypothesis the other cases reuse)."""
    return investigate(reasoner(reflecting(CONCRETE)))


def reflect_again(report: Report, lesson: Any) -> tuple[Lesson | None, list[str]]:
    r = reasoner(reflecting(lesson))
    refuted = next(x for x in report.results if x.hypothesis.kind == "db_pool_exhaustion")
    observations = {o.id: o for o in report.observations}
    written = asyncio.run(r.areflect(report.incident, refuted, report.incident.window.end, observations))
    return written, r.record.notes


def test_a_concrete_model_lesson_is_kept_with_grounded_readings_and_signals(investigated: Report) -> None:
    lesson = next(le for le in investigated.lessons if le.refuted_kind == "db_pool_exhaustion")
    assert not problems(lesson)
    assert lesson.next_action.key() == "metrics.signal(service='{service}',signal='threadpool_queue')"
    assert lesson.trigger.condition.startswith("connection timeouts burst")
    assert "signal:made_up:up" not in lesson.trigger.signals and "log:timeout" in lesson.trigger.signals
    assert lesson.refuting_evidence[0].value == "db_connections_used peaked at 32/200 (16% of its limit)"
    assert investigated.llm is not None and not any("rejected" in n for n in investigated.llm.notes)
    reflect = next(x for x in investigated.llm.exchanges if x.purpose == "reflect")
    assert "m-d2ae3b (metrics.signal(service='order-service',signal='db_connections_used'))" in (
        reflect.request[-1].content or ""
    )


@pytest.mark.parametrize(
    ("lesson", "why"),
    [
        ({**CONCRETE, "next_action": {"tool": "kubectl.rollout", "args": {"deployment": "x"}}}, "is not a tool"),
        ({**CONCRETE, "next_action": {"tool": "metrics.signal", "args": {"signal": "cpu_usage"}}}, "not a concrete"),
        ({**CONCRETE, "refuting_evidence": [{"observation_id": "m-999999", "value": "x"}]}, "not an observation"),
        ({**CONCRETE, "refuting_evidence": []}, "refuting_evidence"),
        (None, "nothing concrete to learn"),
        ("I learned to be careful.", "not valid JSON"),
    ],
)
def test_a_lesson_that_is_not_concrete_is_rejected_and_the_rules_is_kept(
    investigated: Report, lesson: Any, why: str
) -> None:
    kept, notes = reflect_again(investigated, lesson)
    assert kept is not None
    assert kept.next_action.key() == "metrics.signal(service='{service}',signal='db_connections_used')"
    note = next(n for n in notes if "model's lesson was rejected" in n)
    assert why in note
