"""The chat-completions client: one ``POST {base_url}/chat/completions`` over httpx.

Any OpenAI-compatible server answers it (OpenAI, vLLM, Ollama, llama.cpp server, LM Studio, a
LiteLLM proxy). The transport is injected at construction, so tests swap it (respx, or the scripted
fake's ``MockTransport``). Every request is redacted here, the one choke point before the wire.
Retries: 429, 5xx, timeouts and connection errors, with exponential backoff, honouring
``Retry-After`` (seconds or an HTTP date) up to ``max_backoff_s``, through the one retry policy
(:mod:`opsagent.retrying`, tenacity). Token usage comes from the
response; a server that reports none gets an estimate, marked as such. The API key goes into the
``Authorization`` header and nowhere else: never logged, never in a transcript. An answer is read no
further than :data:`MAX_ANSWER_BYTES` (:mod:`opsagent.sizecap`): a larger one is refused
(``ModelRejected``), not retried, and never held whole in memory.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import structlog
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from opsagent.llm.errors import ModelConfigError, ModelRejected, ModelUnavailable
from opsagent.models import PromptMessage, PromptToolCall
from opsagent.redaction import Redactor, redact_messages, redactors
from opsagent.retrying import RETRYABLE_STATUS, GaveUp, Retryable, RetryPolicy, retry_after, with_retries
from opsagent.settings import LLMSettings, ModelPrice
from opsagent.sizecap import MAX_ANSWER_BYTES, BodyTooLarge, size_cap
from opsagent.tokens import estimate_tokens

log = structlog.get_logger("opsagent.llm")

Sleep = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]
#: A tool offered to the model, as the chat-completions API takes it (a JSON Schema inside).
ToolSchema = dict[str, Any]

#: What a model's server may answer that another attempt gets past: the usual ones, a conflict some
#: servers send while a model loads, and 529 (overloaded).
RETRYABLE = RETRYABLE_STATUS | {409, 529}


@dataclass(frozen=True)
class ChatRequest:
    messages: Sequence[PromptMessage]
    tools: Sequence[ToolSchema] = ()
    json_mode: bool = False
    max_tokens: int | None = None
    timeout_s: float | None = None  # time left for this call, retries included


@dataclass(frozen=True)
class ChatResult:
    sent: list[PromptMessage]
    reply: PromptMessage
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    estimated: bool
    attempts: int
    latency_ms: float
    redactions: int


# ---------------------------------------------------------------- the response, as servers send it


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Function(_Wire):
    name: str
    arguments: str | dict[str, Any] | None = None


class _ToolCall(_Wire):
    id: str | None = None
    function: _Function


class _Message(_Wire):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(_Wire):
    message: _Message
    finish_reason: str | None = None


class _Usage(_Wire):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Completion(_Wire):
    choices: list[_Choice] = Field(min_length=1)
    usage: _Usage | None = None


def wire_message(m: PromptMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


def safe_url(url: str) -> str:
    """A URL fit for a report or a log: no user, no password, no query string (keys hide there)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def cost_usd(price: ModelPrice | None, prompt_tokens: int, completion_tokens: int) -> float | None:
    if price is None:
        return None
    return (prompt_tokens * price.input_per_mtok + completion_tokens * price.output_per_mtok) / 1_000_000


@dataclass
class ChatClient:
    """Talks to one model on one OpenAI-compatible server. Keyword-only configuration."""

    base_url: str
    model: str
    api_key: SecretStr | None = None
    temperature: float = 0.0
    max_tokens: int = 1024
    timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    #: the most of an answer read: a server that answers more is refused at this many bytes
    max_answer_bytes: int = MAX_ANSWER_BYTES
    redaction: Sequence[Redactor] = field(default_factory=redactors)
    transport: httpx.AsyncBaseTransport | None = None
    sleep: Sleep = asyncio.sleep
    clock: Clock = time.monotonic

    @classmethod
    def from_settings(
        cls,
        settings: LLMSettings,
        *,
        api_key: SecretStr | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.monotonic,
    ) -> ChatClient:
        if not settings.model:
            raise ModelConfigError("no model named: set llm.model in the config file, OPSAGENT_LLM__MODEL, or --model")
        return cls(
            base_url=settings.base_url,
            model=settings.model,
            api_key=api_key,
            temperature=settings.temperature,
            max_tokens=settings.max_tokens,
            timeout_s=settings.timeout_s,
            retries=settings.retries,
            backoff_s=settings.backoff_s,
            max_backoff_s=settings.max_backoff_s,
            redaction=redactors(emails_too=settings.redact_emails, ips_too=settings.redact_ips),
            transport=transport,
            sleep=sleep,
            clock=clock,
        )

    @property
    def endpoint(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def _headers(self) -> dict[str, str]:
        headers = {"User-Agent": "opsagent", "Accept": "application/json"}
        if self.api_key is not None:
            headers["Authorization"] = f"Bearer {self.api_key.get_secret_value()}"
        return headers

    def _body(self, sent: list[PromptMessage], request: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [wire_message(m) for m in sent],
            "temperature": self.temperature,
            "max_tokens": request.max_tokens or self.max_tokens,
        }
        if request.tools:
            body["tools"] = list(request.tools)
            body["tool_choice"] = "auto"
        if request.json_mode:
            body["response_format"] = {"type": "json_object"}
        return body

    async def complete(self, request: ChatRequest) -> ChatResult:
        sent, redactions = redact_messages(request.messages, self.redaction)
        body = self._body(sent, request)
        started = self.clock()
        deadline = started + request.timeout_s if request.timeout_s is not None else math.inf
        policy = RetryPolicy(retries=self.retries, backoff_s=self.backoff_s, max_backoff_s=self.max_backoff_s)
        hooks = {"response": [size_cap(self.max_answer_bytes)]}
        async with httpx.AsyncClient(transport=self.transport, headers=self._headers(), event_hooks=hooks) as http:

            async def attempt(number: int) -> ChatResult:
                timeout = max(min(self.timeout_s, deadline - self.clock()), 0.001)
                try:
                    response = await http.post(self.endpoint, json=body, timeout=timeout)
                except BodyTooLarge as exc:  # the same request gets the same answer: not retried
                    raise ModelRejected(f"{safe_url(self.endpoint)}: {exc}") from None
                except httpx.TimeoutException:
                    raise Retryable(f"no answer within {timeout:g} s") from None
                except httpx.TransportError as exc:
                    raise Retryable(f"cannot reach {safe_url(self.base_url)} ({type(exc).__name__})") from None
                if response.status_code < 400:
                    return self._result(response, sent, number, started, redactions)
                failure = f"HTTP {response.status_code}: {_error_text(response)}"
                if response.status_code in (401, 403):
                    raise ModelConfigError(
                        f"{safe_url(self.endpoint)} refused the credentials ({failure}); check OPSAGENT_LLM_API_KEY"
                    )
                if response.status_code == 404:
                    raise ModelConfigError(
                        f"{safe_url(self.endpoint)}: {failure}; check the base URL and the model {self.model!r}"
                    )
                if response.status_code not in RETRYABLE:
                    raise ModelRejected(failure)
                raise Retryable(failure, wait_s=retry_after(response.headers))

            def retrying(number: int, wait: float, failure: str) -> None:
                log.warning("llm.retry", attempt=number, wait_s=round(wait, 3), failure=failure)

            try:
                return await with_retries(
                    attempt, policy=policy, sleep=self.sleep, clock=self.clock, deadline=deadline, on_retry=retrying
                )
            except GaveUp as exc:
                if exc.why == "asked_too_long":
                    raise ModelUnavailable(
                        f"{exc.failure}: the server asks to wait {exc.wait_s:g} s, more than {self.max_backoff_s:g} s"
                    ) from None
                if exc.why == "deadline":
                    raise ModelUnavailable(f"{exc.failure}; no time left in the budget to retry") from None
                raise ModelUnavailable(f"{exc.failure} (after {exc.attempts} attempts)") from None

    def _result(
        self, response: httpx.Response, sent: list[PromptMessage], attempts: int, started: float, redactions: int
    ) -> ChatResult:
        try:
            completion = _Completion.model_validate(response.json())
        except (ValueError, ValidationError) as exc:
            raise ModelRejected(f"the server's answer is not a chat completion: {str(exc)[:200]}") from exc
        choice = completion.choices[0]
        calls = [
            PromptToolCall(
                id=c.id or f"call_{i}",
                name=c.function.name,
                arguments=c.function.arguments
                if isinstance(c.function.arguments, str)
                else json.dumps(c.function.arguments or {}),
            )
            for i, c in enumerate(choice.message.tool_calls or [])
        ]
        reply = PromptMessage(role="assistant", content=choice.message.content, tool_calls=calls)
        usage = completion.usage or _Usage()
        prompt, completion_tokens = usage.prompt_tokens, usage.completion_tokens
        estimated = prompt is None or completion_tokens is None
        if prompt is None or completion_tokens is None:
            prompt = estimate_tokens(json.dumps([wire_message(m) for m in sent]))
            completion_tokens = estimate_tokens((reply.content or "") + "".join(c.arguments for c in calls))
        return ChatResult(
            sent=sent,
            reply=reply,
            finish_reason=choice.finish_reason,
            prompt_tokens=prompt,
            completion_tokens=completion_tokens,
            estimated=estimated,
            attempts=attempts,
            latency_ms=round((self.clock() - started) * 1000, 2),
            redactions=redactions,
        )


def _error_text(response: httpx.Response) -> str:
    try:
        payload = response.json()
    except ValueError:
        return response.text[:200] or response.reason_phrase
    if isinstance(payload, dict):
        err = payload.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])[:200]
        if isinstance(err, str):
            return err[:200]
    return str(payload)[:200]
