"""Each string is redacted at its door once: an observation's data and text as the toolbox makes it,
and the report's door walks the rest (the action a reasoner chose, the alert, verdicts) without
walking the observations again."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import UTC, datetime

import pytest

from opsagent import redaction
from opsagent.catalog import default_catalog
from opsagent.incident import open_incident
from opsagent.models import Action, Alert, ErrorData, Observation, SourceKind
from opsagent.redaction import OBSERVATIONS_DONE, redact, redactors, scrub_model
from opsagent.sources import Sources
from opsagent.tools import Toolbox
from opsagent.wordtree import longest_first

SECRET = "password=hunter2hunter2"
ALERT = Alert(labels={"alertname": "HighLatency", "service": "checkout"}, startsAt=datetime(2026, 1, 1, tzinfo=UTC))


def observation(*, data_text: str, query: str) -> Observation:
    return Observation(
        id="o1",
        action=Action(tool="logs.search", args={"query": query}),
        source=SourceKind.logs,
        data=ErrorData(error=data_text),
        text=data_text,
        tokens=1,
    )


def test_the_report_door_masks_what_a_reasoner_asked_for_in_an_observation() -> None:
    obs = observation(data_text="nothing here", query=SECRET)
    scrubbed = scrub_model([obs], done=OBSERVATIONS_DONE)
    assert "hunter2" not in scrubbed[0].action.args["query"]


def test_the_report_door_does_not_walk_what_the_toolbox_redacted() -> None:
    # a secret in data or text could only be there had the toolbox not redacted it: proves the skip
    obs = observation(data_text=SECRET, query="q")
    assert scrub_model([obs], done=OBSERVATIONS_DONE)[0] is obs
    assert "hunter2" not in scrub_model([obs])[0].text  # every other door walks everything


def test_the_toolbox_redacts_an_observations_data_and_text() -> None:
    toolbox = Toolbox(sources=Sources(), catalog=default_catalog(), incident=open_incident(ALERT))
    # an unknown tool: the observation's error and its text echo what was asked
    obs = asyncio.run(toolbox.call(Action(tool=f"logs.{SECRET}", args={"q": SECRET})))
    assert isinstance(obs.data, ErrorData)
    assert "hunter2" not in obs.text and "hunter2" not in obs.data.model_dump_json()


def test_a_chain_built_anew_at_each_door_searches_with_the_gate_its_words_wrote_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    written: list[str] = []

    def writing(words: Iterable[str]) -> str:
        written.append(pattern := longest_first(words))
        return pattern

    monkeypatch.setattr(redaction, "longest_first", writing)
    redaction._gate.cache_clear()
    redaction._gate_of.cache_clear()
    first, again = tuple(redactors()), tuple(redactors())
    assert first != again  # each door builds its own chain (its own step for this process's secrets)
    assert redact(f"login failed {SECRET}", first)[1] == 1 and redact("login failed", again)[1] == 0
    assert len(written) == 1  # the tree of their words (a few dozen) written once, not at every door
