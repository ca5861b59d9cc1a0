"""The incident the product is demonstrated on: a config push shrank order-service's worker pool."""

import asyncio

from opsagent.pipeline import investigate_fixture
from opsagent.report import to_markdown
from tests.conftest import ORDER_INCIDENT


def test_hybrid_concludes_the_config_change_and_refutes_the_db_pool() -> None:
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT))
    assert report.status == "confirmed"
    assert report.root_cause is not None
    assert (report.root_cause.component, report.root_cause.kind) == ("order-service", "config_change")
    changes = [e for e in report.evidence if e.source.value == "changes"]
    assert changes and "core-pool-size" in changes[0].statement and "32" in changes[0].statement
    # a config push has no versions: the verdict says what it changed, not "the old version -> the new"
    assert report.statement.startswith("A configuration change to order-service") and "version" not in report.statement
    refuted = {r.hypothesis.kind: r for r in report.refuted}
    db = refuted["db_pool_exhaustion"]
    assert "db_connections_used" in db.verdict.refuting[0].statement
    assert "/200" in db.verdict.refuting[0].statement
    kinds = [t.kind for t in report.timeline]
    assert kinds.index("change") < kinds.index("onset")
    markdown = to_markdown(report)
    assert "## Ruled out" in markdown and "db_pool_exhaustion" in markdown


def test_react_chases_the_timeouts() -> None:
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, strategy_name="react"))
    first = report.results[0].hypothesis
    assert first.kind == "db_pool_exhaustion"
    assert "log:timeout" in first.why[0]
    assert report.root_cause is None or report.root_cause.kind != "config_change"


def test_replays_are_bit_identical_with_an_injected_clock() -> None:
    ticks = iter(range(10_000))

    def clock() -> float:
        return next(ticks) / 1000

    first, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, clock=clock))
    ticks = iter(range(10_000))
    second, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT, clock=clock))
    assert first.model_dump_json() == second.model_dump_json()


def test_lessons_record_what_refuted_a_hypothesis() -> None:
    report, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT))
    lesson = next(le for le in report.lessons if le.refuted_kind == "db_pool_exhaustion")
    assert lesson.next_action.tool == "metrics.signal"
    assert lesson.next_action.args["signal"] == "db_connections_used"
    assert lesson.refuting_evidence[0].observation_id in {o.id for o in report.observations}
    assert "log:timeout" in lesson.trigger.condition
