"""Notifications: a Slack Block Kit message and a generic JSON webhook, from a real finished
investigation, retried through tenacity, sent by the service when an investigation ends."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from fastapi.testclient import TestClient
from prometheus_client import generate_latest
from structlog.testing import capture_logs

from opsagent.models import Report
from opsagent.pipeline import investigate_fixture
from opsagent.service.app import create_app
from opsagent.service.metrics import ServiceMetrics
from opsagent.service.notifier import (
    Notifiers,
    SlackNotifier,
    WebhookBody,
    WebhookNotifier,
    message,
    sinks_from,
)
from opsagent.store import IncidentRecord
from tests.conftest import ORDER_INCIDENT
from tests.service_support import AUTH, notification, settings, wait_for

NOW = datetime(2026, 3, 17, 14, 20, tzinfo=UTC)
HOOK = "https://hooks.slack.test/services/T000/B000/xyzzy-secret"
ROUTER = "https://events.router.test/v2/enqueue?routing_key=plugh-secret"


@pytest.fixture(scope="module")
def report() -> Report:
    found, _ = asyncio.run(investigate_fixture(ORDER_INCIDENT))
    return found


def record(**over: Any) -> IncidentRecord:
    values: dict[str, Any] = {
        "id": "inc-123",
        "group_key": "g",
        "state": "firing",
        "investigation": "done",
        "service": "order-service",
        "alertname": "OrderServiceHighLatency",
        "title": "order-service p99 latency 2.25s",
        "receiver": "opsagent",
        "created_at": NOW,
        "updated_at": NOW,
        "resolved_at": None,
        "notifications": 1,
        "outcome": "confirmed",
        "root_component": "order-service",
        "root_kind": "config_change",
    }
    values.update(over)
    return IncidentRecord(**values)


def _texts(blocks: list[dict[str, Any]]) -> str:
    out = []
    for b in blocks:
        if "text" in b:
            out.append(b["text"]["text"])
        out.extend(
            e.get("text", "") if isinstance(e.get("text"), str) else e["text"]["text"] for e in b.get("elements", [])
        )
    return "\n".join(out)


def test_the_slack_message_is_block_kit_with_verdict_cause_evidence_next_step_and_a_link(report: Report) -> None:
    body = message(record(), "https://opsagent.example/incidents/inc-123.html", report)
    kinds = [b["type"] for b in body["blocks"]]
    assert kinds[0] == "header" and kinds[-1] == "context" and "actions" in kinds
    text = _texts(body["blocks"])
    assert "*CONFIRMED*: config_change on order-service (confidence" in text
    assert "*Root cause*" in text and "configuration change to order-service" in text
    assert "*Top evidence*" in text and text.count("• `") == min(3, len(report.evidence))
    assert "*Next step*" in text and report.next_steps[0].split(" ")[0] in text
    (button,) = next(b for b in body["blocks"] if b["type"] == "actions")["elements"]
    assert button["url"] == "https://opsagent.example/incidents/inc-123.html"
    assert "config_change on order-service" in body["text"]  # the fallback for notifications
    # Slack's limits: header 150, section text 3000 characters, 50 blocks.
    assert len(body["blocks"]) <= 50 and len(body["blocks"][0]["text"]["text"]) <= 150
    assert all(len(b["text"]["text"]) <= 3000 for b in body["blocks"] if b["type"] == "section")


def test_text_from_the_system_cannot_break_the_message_and_a_relative_link_is_no_button() -> None:
    body = message(record(title="a <b>&c", root_component="<@U123>"), "/incidents/inc-123.html", None)
    text = _texts(body["blocks"]) + body["text"]
    assert "<@U123>" not in text and "&lt;@U123&gt;" in text and "&amp;c" in text
    assert all(b["type"] != "actions" for b in body["blocks"])  # Slack refuses a button without a full URL
    assert "set public_url" in _texts(body["blocks"])
    inconclusive = _texts(message(record(outcome="inconclusive", root_component=None), "/x", None)["blocks"])
    assert "INCONCLUSIVE — NEEDS A HUMAN" in inconclusive


def test_the_generic_webhook_sends_one_documented_body_with_a_dedup_key(report: Report) -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(202)

    sink = WebhookNotifier(ROUTER, public_url="https://opsagent.example", transport=httpx.MockTransport(handler))
    assert asyncio.run(sink.notify(record(), report))
    body = WebhookBody.model_validate(seen[0])
    assert body.dedup_key == "inc-123" and body.severity == "critical" and body.outcome == "confirmed"
    assert (body.root_component, body.root_kind) == ("order-service", "config_change")
    assert body.report_url == "https://opsagent.example/incidents/inc-123.html"
    assert 0 < len(body.evidence) <= 3 and body.next_steps == report.next_steps
    resolved = WebhookBody.model_validate(
        json.loads(json.dumps(sink.body(record(state="resolved"), None)))  # without the report: still whole
    )
    assert resolved.severity == "info" and resolved.evidence == []


def test_retries_follow_the_policy_and_retry_after_and_a_refusal_is_final() -> None:
    answers = iter([httpx.Response(503), httpx.Response(429, headers={"retry-after": "2"}), httpx.Response(200)])
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    metrics = ServiceMetrics()
    ok = SlackNotifier(HOOK, transport=httpx.MockTransport(lambda r: next(answers)), sleep=sleep, metrics=metrics)
    assert asyncio.run(ok.notify(record()))
    assert slept == [0.5, 2.0]
    assert "xyzzy" not in repr(ok)

    slept.clear()
    too_long = SlackNotifier(
        HOOK, transport=httpx.MockTransport(lambda r: httpx.Response(429, headers={"retry-after": "600"})), sleep=sleep
    )
    with capture_logs() as logs:
        assert not asyncio.run(too_long.notify(record())) and slept == []  # never waits ten minutes for a chat message
    assert [e["event"] for e in logs] == ["notify.failed"] and logs[0]["problem"] == "HTTP 429"
    assert "xyzzy" not in str(logs)

    calls: list[int] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(403, text="invalid_token")

    refused = SlackNotifier(HOOK, transport=httpx.MockTransport(refuse), sleep=sleep, metrics=metrics)
    assert not asyncio.run(refused.notify(record())) and calls == [1]

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    gone = SlackNotifier(HOOK, transport=httpx.MockTransport(down), sleep=sleep, attempts=3)
    slept.clear()
    assert not asyncio.run(gone.notify(record())) and slept == [0.5, 1.0]
    text = generate_latest(metrics.registry).decode()
    assert 'opsagent_notify_total{result="sent"} 1.0' in text and 'opsagent_notify_total{result="failed"} 1.0' in text


def test_both_sinks_come_from_the_settings_and_each_gets_the_message(tmp_path: Path) -> None:
    configured = sinks_from(settings(tmp_path, notify_url=HOOK, notify_webhook_url=ROUTER))
    assert isinstance(configured, Notifiers)
    assert [type(s) for s in configured.sinks] == [SlackNotifier, WebhookNotifier]
    assert "plugh" not in repr(configured.sinks) and sinks_from(settings(tmp_path)) is None


def test_the_service_sends_block_kit_with_the_reports_evidence_when_an_investigation_ends(tmp_path: Path) -> None:
    with respx.mock(assert_all_called=False) as router:
        slack = router.post(HOOK).mock(return_value=httpx.Response(200, text="ok"))
        hook = router.post(ROUTER).mock(return_value=httpx.Response(202))
        app = create_app(
            settings(tmp_path, notify_url=HOOK, notify_webhook_url=ROUTER, public_url="https://opsagent.example"),
            runner="thread",
            poll_s=0.2,
        )
        with TestClient(app, headers=AUTH) as client:
            incident_id = client.post("/webhook/alertmanager", json=notification()).json()["incident_id"]
            wait_for(lambda: slack.called and hook.called, timeout_s=30)
    blocks = json.loads(slack.calls[0].request.content)["blocks"]
    text = _texts(blocks)
    assert "*Top evidence*" in text and "*Next step*" in text
    assert any(b["type"] == "actions" and incident_id in b["elements"][0]["url"] for b in blocks)
    routed = WebhookBody.model_validate_json(hook.calls[0].request.content)
    assert routed.dedup_key == incident_id and routed.evidence
