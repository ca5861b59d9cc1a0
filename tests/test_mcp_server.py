"""``opsagent mcp``, driven end to end by the official MCP SDK's own client: in-process, over
streamable HTTP (a real uvicorn in a thread, and ``opsagent mcp --transport http`` as a process) and
over stdio (``opsagent mcp`` as a process)."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from opsagent.mcpserver import DEMO, authenticated, build_server
from opsagent.service.auth import Credentials
from opsagent.settings import Settings
from opsagent.store import Store
from tests.conftest import INCIDENTS, ORDER_INCIDENT
from tests.service_support import TOKEN, free_port, serving, wait_for

TOOLS = {"investigate", "get_report", "list_investigations", "replay", "list_lessons", "feedback"}
ORDER = ORDER_INCIDENT.name
OPSAGENT = Path(sys.executable).with_name("opsagent")


def config(data: Path, **overrides: Any) -> Settings:
    return Settings(data_dir=data, **overrides)


def text(result: Any) -> str:
    return "\n".join(c.text for c in result.content)


async def investigate_demo(client: Client) -> tuple[Any, list[str]]:
    progress: list[str] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    result = await client.call_tool("investigate", {"incident": DEMO}, progress_callback=on_progress)
    return result, progress


def test_every_tool_answers_in_process_and_the_report_is_a_resource(tmp_path: Path) -> None:
    server = build_server(config(tmp_path / "data"), incidents_dir=INCIDENTS)

    async def go() -> None:
        async with Client(server) as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            result, progress = await investigate_demo(client)
            assert not result.is_error, text(result)
            answer = result.structured_content
            assert answer["incident_id"] == ORDER
            assert answer["status"] == "confirmed"
            assert answer["root_cause"] == "order-service/config_change"
            assert answer["suspects"][0] == "order-service/config_change"
            # each of the investigation's events was a progress notification, from triage to the verdicts
            assert progress[0].startswith("triage: top suspects order-service")
            assert any(m.endswith(": confirmed") for m in progress)

            report = await client.call_tool("get_report", {"incident_id": ORDER})
            assert text(report).startswith("# order-service p99 latency")
            as_json = await client.call_tool("get_report", {"incident_id": ORDER, "format": "json"})
            assert '"status": "confirmed"' in text(as_json)
            resource = await client.read_resource(answer["report_uri"])
            assert resource.contents[0].text == text(report)

            listed = await client.call_tool("list_investigations", {"limit": 5})
            assert [r["incident_id"] for r in listed.structured_content["result"]] == [ORDER]
            lessons = await client.call_tool("list_lessons", {})
            assert not lessons.is_error
            stored = Store(config(tmp_path / "data").store)
            assert len(lessons.structured_content["result"]) == len(stored.lessons())
            stored.close()

            done = await client.call_tool("feedback", {"incident_id": ORDER, "correct": True})
            assert done.structured_content["correct"] is True
            listed = await client.call_tool("list_investigations", {})
            assert listed.structured_content["result"][0]["feedback"] == "correct"

            board = await client.call_tool("replay", {"incidents": ORDER})
            assert not board.is_error, text(board)
            assert board.structured_content["ac1"] == 1.0
            assert [s["slug"] for s in board.structured_content["incidents"]] == [ORDER]

    asyncio.run(go())


@pytest.mark.parametrize(
    ("tool", "arguments", "said"),
    [
        ("no_such_tool", {}, "Unknown tool: no_such_tool"),
        ("list_investigations", {"limit": "many"}, "limit"),
        ("list_investigations", {"limit": 0}, "greater than or equal to 1"),
        ("feedback", {"incident_id": ORDER, "correct": "perhaps"}, "correct"),
        ("investigate", {"service": "x" * 100_000, "symptom": "latency"}, "at most 512 characters"),
        (
            "investigate",
            {"alert": {"labels": {f"l{i}": "v" for i in range(1000)}, "startsAt": "2026-03-17T14:02:00Z"}},
            "at most 64 items",
        ),
        ("investigate", {}, "give one trigger"),
        ("investigate", {"incident": DEMO, "service": "checkout"}, "give one trigger"),
        ("investigate", {"service": "checkout"}, "say what is wrong"),
        ("investigate", {"service": "checkout", "symptom": "sadness"}, "sadness"),
        ("investigate", {"incident": "../../etc"}, "no recorded incident of that name"),
        ("investigate", {"incident": DEMO, "strategy": "guess"}, "strategy"),
        ("get_report", {"incident_id": "never-investigated"}, "never-investigated"),
        (
            "feedback",
            {"incident_id": ORDER, "correct": True, "root_cause": "a/b"},
            "root_cause goes with correct=false",
        ),
    ],
)
def test_bad_calls_are_tool_errors_that_say_what_is_wrong(
    tmp_path: Path, tool: str, arguments: dict[str, Any], said: str
) -> None:
    server = build_server(config(tmp_path / "data"), incidents_dir=INCIDENTS)

    async def go() -> Any:
        async with Client(server) as client:
            return await client.call_tool(tool, arguments)

    result = asyncio.run(go())
    assert result.is_error
    assert said in text(result)
    assert "Traceback" not in text(result)
    assert len(text(result)) < 5_000  # a huge argument is not echoed back whole


def test_a_missing_report_resource_is_not_found(tmp_path: Path) -> None:
    from mcp.shared.exceptions import MCPError

    server = build_server(config(tmp_path / "data"))

    async def go() -> MCPError:
        async with Client(server) as client:
            with pytest.raises(MCPError) as refused:
                await client.read_resource("opsagent://reports/nothing-here")
            return refused.value

    refused = asyncio.run(go())
    assert "no investigation nothing-here" in str(refused)
    assert str(tmp_path) not in str(refused)  # where the store is stays on the server


def test_without_an_incidents_directory_only_the_demo_is_named(tmp_path: Path) -> None:
    server = build_server(config(tmp_path / "data"))

    async def go() -> Any:
        async with Client(server) as client:
            return await client.call_tool("replay", {}), await client.call_tool("investigate", {"incident": ORDER})

    whole, named = asyncio.run(go())
    assert whole.is_error and "no incidents directory" in text(whole)
    assert named.is_error and "no incidents directory" in text(named)


def http_client(url: str, token: str | None) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client(streamable_http_client(f"{url}/mcp", http_client=httpx2.AsyncClient(headers=headers, timeout=60)))


def test_streamable_http_takes_the_webhooks_bearer_token(tmp_path: Path) -> None:
    settings = config(tmp_path / "data", webhook_token=TOKEN)
    creds = Credentials.from_settings(settings)
    server = build_server(settings, incidents_dir=INCIDENTS)
    app = authenticated(server.streamable_http_app(), creds.allows, creds.challenge)
    with serving(app) as url:  # type: ignore[arg-type]
        refused = httpx.post(f"{url}/mcp", json={}, headers={"Authorization": "Bearer wrong"})
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert httpx.post(f"{url}/mcp", json={}).status_code == 401

        async def go() -> tuple[Any, list[str], Any]:
            async with http_client(url, TOKEN) as client:
                result, progress = await investigate_demo(client)
                report = await client.read_resource(f"opsagent://reports/{ORDER}")
                return result, progress, report

        result, progress, report = asyncio.run(go())
    assert result.structured_content["root_cause"] == "order-service/config_change"
    assert progress and progress[0].startswith("triage")
    assert report.contents[0].text.startswith("# order-service p99 latency")


@pytest.fixture
def mcp_process(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``opsagent mcp --transport http`` as a process on a free loopback port; yields its URL and data dir."""
    data = tmp_path / "served"
    port = free_port()
    env = {**os.environ, "OPSAGENT_DATA_DIR": str(data), "OPSAGENT_WEBHOOK_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [str(OPSAGENT), "mcp", "--transport", "http", "--port", str(port), "--incidents", str(INCIDENTS)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"opsagent mcp exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            return httpx.get(f"{url}/mcp", timeout=1).status_code == 401
        except httpx.TransportError:
            return False

    try:
        wait_for(up, timeout_s=60)
        yield url, data
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_client_that_disconnects_mid_investigation_leaves_it_to_finish_and_be_stored(
    mcp_process: tuple[str, Path],
) -> None:
    url, data = mcp_process

    async def list_first() -> None:  # the store exists before it is locked below
        async with http_client(url, TOKEN) as client:
            assert (await client.call_tool("list_investigations", {})).structured_content["result"] == []

    asyncio.run(list_first())
    # The store is held locked until the client has gone, so the investigation cannot have been
    # stored (its last step) when the client disconnects, however fast the machine is.
    lock = sqlite3.connect(data / "opsagent.db", isolation_level=None)

    async def leave_early() -> None:
        started = asyncio.Event()

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            started.set()

        async with http_client(url, TOKEN) as client:
            call = asyncio.ensure_future(
                client.call_tool("investigate", {"incident": ORDER}, progress_callback=on_progress)
            )
            await started.wait()
            lock.execute("BEGIN EXCLUSIVE")
            assert not call.done()
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call

    asyncio.run(leave_early())
    lock.execute("COMMIT")
    lock.close()

    async def report() -> Any:
        async with http_client(url, TOKEN) as client:
            return await client.call_tool("get_report", {"incident_id": ORDER})

    found = wait_for(lambda: (r := asyncio.run(report())) and not r.is_error and r, timeout_s=60)
    assert text(found).startswith("# order-service p99 latency")


def test_stdio_round_trip_with_opsagent_mcp_as_a_process(tmp_path: Path) -> None:
    data = tmp_path / "stdio"
    params = StdioServerParameters(
        command=str(OPSAGENT),
        args=["mcp", "--incidents", str(INCIDENTS)],
        env={**os.environ, "OPSAGENT_DATA_DIR": str(data)},
    )

    async def go() -> tuple[set[str], Any, list[str], Any]:
        async with Client(params) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            result, progress = await investigate_demo(client)
            listed = await client.call_tool("list_investigations", {})
            return tools, result, progress, listed

    tools, result, progress, listed = asyncio.run(go())
    assert tools == TOOLS
    assert result.structured_content["root_cause"] == "order-service/config_change"
    assert progress
    assert [r["incident_id"] for r in listed.structured_content["result"]] == [ORDER]


def test_opsagent_mcp_refuses_http_without_credentials_and_unknown_transports(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPSAGENT_WEBHOOK")}
    env["OPSAGENT_DATA_DIR"] = str(tmp_path / "d")
    no_creds = subprocess.run(
        [str(OPSAGENT), "mcp", "--transport", "http", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
    )
    assert no_creds.returncode == 2
    assert "OPSAGENT_WEBHOOK_TOKEN" in no_creds.stderr
    wrong = subprocess.run(
        [str(OPSAGENT), "mcp", "--transport", "carrier-pigeon"], env=env, capture_output=True, text=True
    )
    assert wrong.returncode == 2
    assert "choose stdio or http" in wrong.stderr
    assert shutil.which(str(OPSAGENT))


def test_a_recorded_incident_that_does_not_load_is_a_tool_error_naming_it(tmp_path: Path) -> None:
    broken = tmp_path / "incidents" / "broken"
    broken.mkdir(parents=True)
    (broken / "incident.yaml").write_text("alert: {labels: {}}\n")
    server = build_server(config(tmp_path / "data"), incidents_dir=tmp_path / "incidents")

    async def go() -> Any:
        async with Client(server) as client:
            return await client.call_tool("investigate", {"incident": "broken"})

    result = asyncio.run(go())
    assert result.is_error
    assert "incident.yaml" in text(result)


@pytest.mark.parametrize(
    "arguments",
    [
        {"service": "checkout", "symptom": "errors", "since": "30m"},
        {
            "alert": {
                "labels": {"alertname": "CheckoutErrors", "service": "checkout"},
                "startsAt": "2026-03-17T14:02:00Z",
            }
        },
    ],
)
def test_an_alert_or_a_question_is_investigated_against_the_configured_sources(
    tmp_path: Path, arguments: dict[str, Any]
) -> None:
    server = build_server(config(tmp_path / "data"))  # no source configured: nothing can be read

    async def go() -> tuple[Any, Any]:
        async with Client(server) as client:
            answer = await client.call_tool("investigate", arguments)
            return answer, await client.call_tool("list_investigations", {})

    answer, listed = asyncio.run(go())
    assert not answer.is_error, text(answer)
    assert answer.structured_content["status"] == "inconclusive"
    assert [r["incident_id"] for r in listed.structured_content["result"]] == [answer.structured_content["incident_id"]]
