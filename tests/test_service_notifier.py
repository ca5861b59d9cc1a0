"""Notifications: a Slack Block Kit message (incoming webhook, or the Web API in one thread per
incident) and a generic JSON webhook, from a real finished investigation; one post says how it
went; the service sends them through its outbox when an investigation ends."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from fastapi.testclient import TestClient

from opsagent.models import Report
from opsagent.pipeline import investigate_fixture
from opsagent.service.app import create_app
from opsagent.service.notifier import (
    IDEMPOTENCY_HEADER,
    SINK_ANSWER_BYTES,
    SLACK_POST,
    Delivery,
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


KEY = "inc-123:investigated"


def deliver(
    sink: SlackNotifier | WebhookNotifier, incident: IncidentRecord, report: Report | None = None, **kw: Any
) -> Delivery:
    options: dict[str, Any] = {"key": KEY, "event": "investigated", "thread": None, **kw}
    return asyncio.run(sink.deliver(incident, report, **options))


def test_the_generic_webhook_sends_one_documented_body_with_a_dedup_key_and_the_notifications_key(
    report: Report,
) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(202)

    sink = WebhookNotifier(ROUTER, public_url="https://opsagent.example", transport=httpx.MockTransport(handler))
    assert deliver(sink, record(), report).outcome == "sent"
    assert seen[0].headers[IDEMPOTENCY_HEADER] == KEY
    body = WebhookBody.model_validate_json(seen[0].content)
    assert body.dedup_key == "inc-123" and body.severity == "critical" and body.outcome == "confirmed"
    assert body.notification_key == KEY and body.event == "investigation.finished"
    assert (body.root_component, body.root_kind) == ("order-service", "config_change")
    assert body.report_url == "https://opsagent.example/incidents/inc-123.html"
    assert 0 < len(body.evidence) <= 3 and body.next_steps == report.next_steps
    resolved = WebhookBody.model_validate(  # without the report: still whole
        json.loads(json.dumps(sink.body(record(state="resolved"), None, key="k", event="resolved", thread=None)))
    )
    assert resolved.severity == "info" and resolved.evidence == [] and resolved.event == "incident.resolved"


def test_one_post_says_whether_to_try_again_and_when_and_never_shows_the_url() -> None:
    answers = {
        "503": httpx.Response(503),
        "429": httpx.Response(429, headers={"retry-after": "7"}),
        "403": httpx.Response(403, text="invalid_token"),
    }
    for status, answer in answers.items():
        sink = SlackNotifier(HOOK, transport=httpx.MockTransport(lambda r, a=answer: a))
        delivery = deliver(sink, record())
        assert delivery.problem == f"HTTP {status}"
        assert delivery.outcome == ("refused" if status == "403" else "retry")
        assert delivery.wait_s == (7.0 if status == "429" else None)

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    gone = SlackNotifier(HOOK, transport=httpx.MockTransport(down))
    assert deliver(gone, record()) == deliver(gone, record()) and deliver(gone, record()).outcome == "retry"
    assert "xyzzy" not in repr(gone) and "xyzzy" not in str(deliver(gone, record()))


def test_a_sink_that_does_not_answer_within_the_timeout_is_tried_again() -> None:
    async def stalls(request: httpx.Request) -> httpx.Response:
        await asyncio.Event().wait()  # never answers: only the sink's timeout ends the post
        raise AssertionError("unreachable")

    sink = WebhookNotifier(ROUTER, transport=httpx.MockTransport(stalls), timeout_s=0.05)
    delivery = deliver(sink, record())
    assert delivery.outcome == "retry" and delivery.problem == "no answer within 0.05 s"


def test_a_sink_that_answers_200_mb_is_not_read_past_a_megabyte_and_is_tried_again() -> None:
    sent = {"bytes": 0}

    async def endless_answer() -> AsyncIterator[bytes]:
        for _ in range(200):  # 200 MB if read to the end
            sent["bytes"] += 1 << 20
            yield b"x" * (1 << 20)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=endless_answer())

    for sink in (
        WebhookNotifier(ROUTER, transport=httpx.MockTransport(handler)),
        SlackNotifier(token="xoxb-t", channel="#oncall", transport=httpx.MockTransport(handler)),
    ):
        sent["bytes"] = 0
        delivery = deliver(sink, record())
        assert delivery == Delivery(outcome="retry", problem=f"an answer longer than {SINK_ANSWER_BYTES:,} bytes")
        assert sent["bytes"] <= SINK_ANSWER_BYTES + (2 << 20)  # stopped at the cap, not at 200 MB


def test_slack_through_the_web_api_replies_in_the_thread_of_the_incidents_first_post() -> None:
    seen: list[httpx.Request] = []
    answers = iter(
        [
            httpx.Response(200, json={"ok": True, "channel": "C1", "ts": "1700000000.000100"}),
            httpx.Response(200, json={"ok": True, "channel": "C1", "ts": "1700000100.000200"}),
            httpx.Response(200, json={"ok": False, "error": "ratelimited"}, headers={"retry-after": "3"}),
            httpx.Response(200, json={"ok": False, "error": "channel_not_found"}),
        ]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return next(answers)

    sink = SlackNotifier(token="xoxb-plugh-token", channel="#oncall", transport=httpx.MockTransport(handler))
    first = deliver(sink, record())
    assert first.outcome == "sent" and first.thread == "1700000000.000100"
    assert deliver(sink, record(state="resolved"), event="resolved", thread=first.thread).outcome == "sent"
    assert [str(r.url) for r in seen] == [SLACK_POST, SLACK_POST]
    bodies = [json.loads(r.content) for r in seen]
    assert bodies[0]["channel"] == "#oncall" and "thread_ts" not in bodies[0]
    assert bodies[1]["thread_ts"] == "1700000000.000100" and bodies[1]["blocks"]
    assert bodies[1]["reply_broadcast"] is True  # the resolution shows in the channel, not only the thread
    assert seen[0].headers["authorization"] == "Bearer xoxb-plugh-token"
    limited = deliver(sink, record())
    assert (limited.outcome, limited.problem, limited.wait_s) == ("retry", "Slack: ratelimited", 3.0)
    assert deliver(sink, record()).outcome == "refused"  # a channel that is not there will not appear
    assert "plugh" not in repr(sink)


def test_through_an_incoming_webhook_each_update_is_a_new_message_that_names_the_incident_it_updates() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, text="ok")  # an incoming webhook: no ts, nothing to thread under

    sink = SlackNotifier(HOOK, public_url="https://opsagent.example", transport=httpx.MockTransport(handler))
    first = deliver(sink, record())
    assert first == Delivery(outcome="sent")  # no thread: the outbox keeps none
    resolved = record(state="resolved", resolved_at=NOW)
    for _ in range(2):  # a post whose answer was lost goes again: the same message, the same key
        deliver(sink, resolved, key="inc-123:resolved", event="resolved", thread=first.thread)
    investigated, update, again = seen
    assert update == again and all("thread_ts" not in b and "channel" not in b for b in seen)
    assert "inc-123:investigated" in _texts(investigated["blocks"])
    assert "inc-123:resolved" in _texts(update["blocks"]) and "inc-123:investigated" not in _texts(update["blocks"])
    assert update["blocks"][0]["text"]["text"] == "Resolved: order-service p99 latency 2.25s"
    for said in (update["text"], _texts(update["blocks"])):  # read alone, outside any thread
        assert "Update to incident inc-123 (order-service, opened 2026-03-17 14:20 UTC): the alert resolved" in said
        assert "The investigation found: confirmed: config_change on order-service." in said
    assert any(b["type"] == "actions" for b in update["blocks"])


def test_a_resolution_heard_before_the_investigation_ended_says_its_result_follows() -> None:
    early = message(
        record(state="resolved", investigation="running", outcome=None), "/incidents/inc-123.html", event="resolved"
    )
    assert "Its investigation has not ended yet: its result follows." in early["text"]
    assert "inconclusive" not in early["text"]
    failed = message(record(state="resolved", outcome="failed", error="no source answered"), "/x", event="resolved")
    assert "Its investigation failed: no source answered." in _texts(failed["blocks"])
    assert "set public_url" in _texts(failed["blocks"]) and all(b["type"] != "actions" for b in failed["blocks"])


def test_both_sinks_come_from_the_settings_and_the_web_api_needs_a_channel(tmp_path: Path) -> None:
    configured = sinks_from(settings(tmp_path, notify_url=HOOK, notify_webhook_url=ROUTER))
    assert [type(s) for s in configured] == [SlackNotifier, WebhookNotifier]
    assert [s.name for s in configured] == ["slack", "webhook"]
    assert "plugh" not in repr(configured) and sinks_from(settings(tmp_path)) == []
    web_api = sinks_from(settings(tmp_path, notify_url=HOOK, slack_token="xoxb-t", slack_channel="#oncall"))
    assert len(web_api) == 1 and isinstance(web_api[0], SlackNotifier) and web_api[0].channel == "#oncall"
    with pytest.raises(ValueError, match="slack_token is set without slack_channel"):
        settings(tmp_path, slack_token="xoxb-t")


def test_the_service_sends_block_kit_with_the_reports_evidence_when_an_investigation_ends_then_the_resolution(
    tmp_path: Path,
) -> None:
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
            client.post("/webhook/alertmanager", json=notification(status="resolved"))
            wait_for(lambda: slack.call_count == hook.call_count == 2, timeout_s=30)
    for sink in (slack, hook):  # the investigation's end, then the resolution: each once, under its own key
        keys = [c.request.headers[IDEMPOTENCY_HEADER] for c in sink.calls]
        assert keys == [f"{incident_id}:investigated", f"{incident_id}:resolved"]
    assert f"Update to incident {incident_id}" in json.loads(slack.calls[1].request.content)["text"]
    blocks = json.loads(slack.calls[0].request.content)["blocks"]
    text = _texts(blocks)
    assert "*Top evidence*" in text and "*Next step*" in text
    assert any(b["type"] == "actions" and incident_id in b["elements"][0]["url"] for b in blocks)
    routed = WebhookBody.model_validate_json(hook.calls[0].request.content)
    assert routed.dedup_key == incident_id and routed.evidence
