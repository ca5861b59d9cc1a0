"""Fuzzing the two doors input comes through (hypothesis, bounded): alert files given to
`opsagent investigate`, and bodies posted to the webhook. Whatever arrives — bytes that are not
text, YAML or JSON of any shape, a valid alert with one field replaced by anything — the CLI exits
0 or 2 with no traceback, the webhook answers no 5xx, and what it accepted is investigated without
a failed job."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from opsagent.cli import app
from opsagent.service.app import create_app
from tests.conftest import ORDER_INCIDENT
from tests.service_support import AUTH, notification, wait_for
from tests.service_support import settings as service_settings

runner = CliRunner()
FUZZ = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck), derandomize=True
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "2026-03-17T14:02:00Z", "NaN", "\x00"]),
)
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=12,
)
ALERT: dict[str, Any] = yaml.safe_load((ORDER_INCIDENT / "incident.yaml").read_text())["alert"]
FIELDS = ["labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint", "status"]


@st.composite
def mutated_alert(draw: st.DrawFn) -> dict[str, Any]:
    """The order-service alert with one field replaced (or removed), or a label set of anything."""
    alert = json.loads(json.dumps(ALERT))
    field = draw(st.sampled_from([*FIELDS, "labels.*"]))
    if field == "labels.*":
        alert["labels"] = draw(st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=5))
    elif draw(st.booleans()):
        alert.pop(field, None)
    else:
        alert[field] = draw(documents)
    return alert


alert_files = st.one_of(
    st.binary(max_size=300),
    documents.map(lambda d: yaml.safe_dump(d, allow_unicode=True).encode("utf-8", "surrogatepass")),
    mutated_alert().map(lambda a: json.dumps(a, ensure_ascii=False).encode("utf-8", "surrogatepass")),
    mutated_alert().map(lambda a: json.dumps({"version": "4", "alerts": [a]}).encode()),
)


def test_no_alert_file_makes_investigate_fail(tmp_path: Path) -> None:
    path = tmp_path / "alert.yaml"
    exits: set[int] = set()

    @FUZZ
    @given(content=alert_files)
    def investigate(content: bytes) -> None:
        path.write_bytes(content)
        result = runner.invoke(app, ["investigate", str(path), "--json", "--no-lessons", "--wall-s", "10"])
        assert result.exception is None or isinstance(result.exception, SystemExit), result.output
        assert result.exit_code in (2, 3), result.output  # refused, or inconclusive: no source to read
        assert "Traceback" not in result.output
        if result.exit_code == 3:
            assert json.loads(result.stdout)["unreadable_sources"]  # no source configured: each is named
        exits.add(result.exit_code)

    investigate()
    assert exits == {2, 3}  # the fuzzing reached both outcomes: valid alerts and refused ones


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    service = create_app(service_settings(tmp_path, fixtures_dir=None), runner="thread", poll_s=0.1)
    with TestClient(service, headers=AUTH) as c:
        yield c


@st.composite
def mutated_payload(draw: st.DrawFn) -> bytes:
    body: dict[str, Any] = notification(group_key=draw(st.text(min_size=1, max_size=30)))
    choice = draw(st.integers(min_value=0, max_value=3))
    if choice == 0:  # a top-level field replaced or removed
        key = draw(st.sampled_from(sorted(body)))
        if draw(st.booleans()):
            body.pop(key)
        else:
            body[key] = draw(documents)
    elif choice == 1:  # its alert mutated
        body["alerts"] = [draw(mutated_alert())]
    elif choice == 2:  # a document of any shape
        return json.dumps(draw(documents)).encode()
    else:
        return draw(st.binary(max_size=200))
    return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")


def test_no_body_makes_the_webhook_answer_a_5xx(client: TestClient) -> None:
    statuses: set[int] = set()

    @FUZZ
    @given(
        body=mutated_payload(),
        content_type=st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain", None]),
    )
    def post(body: bytes, content_type: str | None) -> None:
        headers = {"content-type": content_type} if content_type else {}
        response = client.post("/webhook/alertmanager", content=body, headers=headers)
        assert response.status_code in (202, 415, 422), (response.status_code, response.text)
        statuses.add(response.status_code)

    post()
    assert statuses == {202, 415, 422}

    def drained() -> dict[str, int] | None:
        counts = client.get("/readyz").json()
        return counts if counts["queued"] == counts["running"] == 0 else None

    wait_for(drained, timeout_s=120)
    failed = client.get("/incidents?investigation=failed").json()
    assert failed["count"] == 0, failed  # every accepted notification was investigated, none crashed its job
