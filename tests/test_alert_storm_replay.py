"""The recorded alert storm replays as one incident: the three pages joined, the unrelated alert of
the same minutes left out, the root cause found, and every rendering says which cause explains
each alert."""

from __future__ import annotations

import asyncio
import io

import pytest
from rich.console import Console

from opsagent.models import Report
from opsagent.pipeline import investigate_fixture
from opsagent.report import render, to_markdown
from opsagent.scoreboard import score
from tests.conftest import INCIDENTS

STORM = INCIDENTS / "inventory-db-alert-storm"


@pytest.fixture(scope="module")
def replayed() -> tuple[Report, object]:
    return asyncio.run(investigate_fixture(STORM))


def test_the_storm_is_one_incident_whose_objective_names_every_paged_service(replayed: tuple) -> None:
    report, truth = replayed
    incident = report.incident
    assert incident.services == ("cart-service", "inventory-service", "order-service")
    assert [a.alertname for a in incident.alerts[1:]] == truth.joined
    assert not {a.alertname for a in incident.alerts} & set(truth.apart)
    result = score(STORM.name, report, truth)
    assert result.hit1 and result.verdict_ok and result.storm_ok


def test_each_alert_of_the_storm_is_explained_by_the_root_cause_in_json_terminal_and_markdown(
    replayed: tuple,
) -> None:
    report, truth = replayed
    cause = f"{truth.service}/{truth.kind}"
    assert [(a.alert.alertname, a.cause) for a in report.alerts] == [
        (a.alertname, cause) for a in report.incident.alerts
    ]
    assert report.alerts[2].alert.reason == "order-service and cart-service both depend on inventory-service"
    markdown = to_markdown(report)
    assert "## Alerts joined (3)" in markdown
    assert "| OrderLatencyHigh | order-service |" in markdown and "BackupVolumeFilling" not in markdown
    out = io.StringIO()
    render(report, Console(file=out, width=80, color_system=None))
    text = " ".join(out.getvalue().split())
    assert "Alerts joined (3)" in text and f"explained by: {cause} (the root cause: order-service calls" in text
