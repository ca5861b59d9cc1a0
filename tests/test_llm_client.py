"""The chat-completions client against a respx-mocked OpenAI-compatible endpoint: request shape,
usage, retries with backoff and Retry-After, timeouts, and the mapping of every failure."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest
import respx
from pydantic import SecretStr
from structlog.testing import capture_logs

from opsagent.llm import ChatClient, ChatRequest, ModelConfigError, ModelError, ModelRejected, ModelUnavailable
from opsagent.llm.client import RETRYABLE, cost_usd, retry_after, safe_url
from opsagent.models import PromptMessage
from opsagent.settings import ModelPrice
from tests.llm_support import BASE_URL, ENDPOINT

KEY = "sk-test-Zx9Qw8Er7Ty6Ui5Op4As3Df2"
HELLO = ChatRequest(messages=[PromptMessage(role="user", content="hello")])


def completion(content: str = "hi", usage: bool = True) -> dict[str, object]:
    body: dict[str, object] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
    }
    if usage:
        body["usage"] = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
    return body


class Sleeps:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def client(sleep: Sleeps | None = None, **kw: object) -> ChatClient:
    options: dict[str, object] = {"base_url": BASE_URL, "model": "m", "sleep": sleep or Sleeps()} | kw
    return ChatClient(**options)  # type: ignore[arg-type]


@respx.mock
def test_request_shape_usage_and_key_in_the_header_only() -> None:
    route = respx.post(ENDPOINT).mock(return_value=httpx.Response(200, json=completion()))
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    result = asyncio.run(
        client(api_key=SecretStr(KEY), temperature=0.2, max_tokens=300).complete(
            ChatRequest(messages=HELLO.messages, tools=tools, json_mode=True, max_tokens=200)
        )
    )
    request = route.calls.last.request
    body = json.loads(request.content)
    assert body["model"] == "m" and body["temperature"] == 0.2 and body["max_tokens"] == 200
    assert body["messages"] == [{"role": "user", "content": "hello"}]
    assert body["tools"] == tools and body["tool_choice"] == "auto"
    assert body["response_format"] == {"type": "json_object"}
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in request.content.decode()
    assert (result.prompt_tokens, result.completion_tokens, result.estimated) == (11, 3, False)
    assert result.reply.content == "hi" and result.attempts == 1


@respx.mock
def test_usage_is_estimated_when_the_server_reports_none() -> None:
    respx.post(ENDPOINT).mock(return_value=httpx.Response(200, json=completion("a longer answer", usage=False)))
    result = asyncio.run(client().complete(HELLO))
    assert result.estimated and result.prompt_tokens > 0 and result.completion_tokens > 0


@respx.mock
def test_429_then_success_honours_retry_after() -> None:
    respx.post(ENDPOINT).mock(
        side_effect=[
            httpx.Response(429, headers={"Retry-After": "7"}, json={"error": {"message": "slow down"}}),
            httpx.Response(200, json=completion()),
        ]
    )
    sleeps = Sleeps()
    result = asyncio.run(client(sleeps, max_backoff_s=30).complete(HELLO))
    assert sleeps.waits == [7.0] and result.attempts == 2


def test_retry_after_as_an_http_date() -> None:
    now = datetime(2026, 3, 17, 14, 0, tzinfo=UTC)
    header = format_datetime(now + timedelta(seconds=12), usegmt=True)
    assert retry_after({"retry-after": header}, now=now) == pytest.approx(12)
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({}) is None


@respx.mock
def test_5xx_backs_off_exponentially_then_succeeds() -> None:
    respx.post(ENDPOINT).mock(
        side_effect=[httpx.Response(503), httpx.Response(502), httpx.Response(200, json=completion())]
    )
    sleeps = Sleeps()
    result = asyncio.run(client(sleeps, backoff_s=0.5).complete(HELLO))
    assert sleeps.waits == [0.5, 1.0] and result.attempts == 3


@respx.mock
def test_a_timeout_is_retried() -> None:
    respx.post(ENDPOINT).mock(side_effect=[httpx.ReadTimeout("slow"), httpx.Response(200, json=completion())])
    assert asyncio.run(client().complete(HELLO)).attempts == 2


@respx.mock
def test_timeouts_every_time_end_as_model_unavailable_after_the_retries() -> None:
    route = respx.post(ENDPOINT).mock(side_effect=httpx.ConnectTimeout("nobody home"))
    with pytest.raises(ModelUnavailable, match="after 3 attempts"):
        asyncio.run(client(retries=2).complete(HELLO))
    assert route.call_count == 3


@respx.mock
def test_a_retry_after_longer_than_allowed_gives_up_without_waiting() -> None:
    respx.post(ENDPOINT).mock(return_value=httpx.Response(429, headers={"Retry-After": "3600"}))
    sleeps = Sleeps()
    with pytest.raises(ModelUnavailable, match="asks to wait 3600 s"):
        asyncio.run(client(sleeps).complete(HELLO))
    assert sleeps.waits == []


@respx.mock
def test_no_retry_past_the_time_left() -> None:
    respx.post(ENDPOINT).mock(return_value=httpx.Response(503))
    with pytest.raises(ModelUnavailable, match="no time left"):
        asyncio.run(client(backoff_s=5).complete(ChatRequest(messages=HELLO.messages, timeout_s=2)))


@respx.mock
def test_bad_credentials_stop_the_run_and_do_not_show_the_key() -> None:
    respx.post(ENDPOINT).mock(return_value=httpx.Response(401, json={"error": {"message": "invalid api key"}}))
    with pytest.raises(ModelConfigError) as info:
        asyncio.run(client(api_key=SecretStr(KEY)).complete(HELLO))
    assert KEY not in str(info.value) and "OPSAGENT_LLM_API_KEY" in str(info.value)


@respx.mock
def test_a_rejected_request_is_not_retried() -> None:
    route = respx.post(ENDPOINT).mock(
        return_value=httpx.Response(400, json={"error": {"message": "context length exceeded"}})
    )
    with pytest.raises(ModelRejected, match="context length exceeded"):
        asyncio.run(client().complete(HELLO))
    assert route.call_count == 1


@respx.mock
def test_an_answer_that_is_not_a_chat_completion_is_rejected() -> None:
    respx.post(ENDPOINT).mock(return_value=httpx.Response(200, json={"choices": []}))
    with pytest.raises(ModelRejected, match="not a chat completion"):
        asyncio.run(client().complete(HELLO))


@respx.mock
def test_an_answer_of_200_mb_is_refused_at_the_size_cap_as_it_streams_in_and_not_retried() -> None:
    sent = {"bytes": 0}

    class Huge(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b'{"id": "chatcmpl-1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "'
            chunk = b"x" * (1 << 20)
            for _ in range(200):
                sent["bytes"] += len(chunk)
                yield chunk

    route = respx.post(ENDPOINT).mock(side_effect=lambda request: httpx.Response(200, stream=Huge()))
    with pytest.raises(ModelRejected, match="passed 33,554,432 bytes"):
        asyncio.run(client().complete(HELLO))
    assert sent["bytes"] < 40 * (1 << 20) and route.call_count == 1  # the cap and a chunk, once

    said = {"content-length": str(200 * (1 << 20))}  # one that says its size is not read at all
    sent["bytes"] = 0
    route.mock(side_effect=lambda request: httpx.Response(200, headers=said, stream=Huge()))
    with pytest.raises(ModelRejected, match="passed 1,024 bytes"):
        asyncio.run(client(max_answer_bytes=1024).complete(HELLO))
    assert sent["bytes"] == 0


TRANSPORT_ERRORS = [
    httpx.ConnectTimeout,
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.PoolTimeout,
    httpx.ConnectError,
    httpx.ReadError,
    httpx.WriteError,
    httpx.CloseError,
    httpx.RemoteProtocolError,
    httpx.LocalProtocolError,
    httpx.ProxyError,
    httpx.UnsupportedProtocol,
]


def _leaves(cls: type[Exception]) -> set[type[Exception]]:
    subs = cls.__subclasses__()
    return {cls} if not subs else set().union(*(_leaves(s) for s in subs))


def test_the_list_of_transport_errors_is_every_httpx_transport_error() -> None:
    assert _leaves(httpx.TransportError) == set(TRANSPORT_ERRORS)


@pytest.mark.parametrize("error", TRANSPORT_ERRORS)
def test_every_transport_error_maps_to_model_unavailable(error: type[httpx.TransportError]) -> None:
    with respx.mock:
        respx.post(ENDPOINT).mock(side_effect=error("boom"))
        with pytest.raises(ModelUnavailable):
            asyncio.run(client(retries=1).complete(HELLO))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 408, 409, 413, 422, 425, 429, 500, 502, 503, 504, 529])
def test_every_error_status_maps_to_a_model_error_or_a_config_error(status: int) -> None:
    with respx.mock:
        respx.post(ENDPOINT).mock(return_value=httpx.Response(status))
        with pytest.raises((ModelError, ModelConfigError)) as info:
            asyncio.run(client(retries=1).complete(HELLO))
    expected = (
        ModelUnavailable if status in RETRYABLE else ModelConfigError if status in (401, 403, 404) else ModelRejected
    )
    assert type(info.value) is expected


def test_urls_in_reports_carry_no_credentials() -> None:
    assert safe_url("https://user:pw@llm.example.com:8443/v1?api_key=abc") == "https://llm.example.com:8443/v1"


def test_price_table_gives_cost() -> None:
    price = ModelPrice(input_per_mtok=0.15, output_per_mtok=0.6)
    assert cost_usd(price, 1_000_000, 500_000) == pytest.approx(0.45)
    assert cost_usd(None, 10, 10) is None


@respx.mock
def test_the_key_is_never_logged() -> None:
    respx.post(ENDPOINT).mock(side_effect=[httpx.Response(503), httpx.Response(200, json=completion())])
    with capture_logs() as logs:
        asyncio.run(client(api_key=SecretStr(KEY)).complete(HELLO))
    assert logs and KEY not in repr(logs)
