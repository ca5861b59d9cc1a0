"""Retries of opsagent's outgoing calls (the model's server, notification sinks), one policy through
tenacity instead of a loop per caller.

A caller runs one attempt at a time and raises :class:`Retryable` for an outcome another attempt
may mend (a timeout, a refused connection, 429, 5xx), with the wait the other side asked for
(``Retry-After``) when it said one; anything else it raises ends the call at once. The policy waits
that long, or exponentially longer from ``backoff_s`` up to ``max_backoff_s``, and gives up
(:class:`GaveUp`, saying why) after ``retries`` retries, when the other side asks for a longer wait
than ``max_backoff_s``, or when the next wait would end past the caller's deadline. Sleep and clock
are injected, so tests neither wait nor guess.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Literal, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]
#: HTTP statuses another attempt may get past.
RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


class Retryable(Exception):
    """An attempt failed in a way the next may not; ``wait_s``: how long the other side asked to wait."""

    def __init__(self, failure: str, *, wait_s: float | None = None) -> None:
        self.failure = failure
        self.wait_s = wait_s
        super().__init__(failure)


class GaveUp(Exception):
    """No attempt succeeded: ``failure`` is the last one's, ``why`` what stopped the retries."""

    def __init__(
        self, failure: str, *, attempts: int, why: Literal["attempts", "asked_too_long", "deadline"], wait_s: float
    ) -> None:
        self.failure = failure
        self.attempts = attempts
        self.why = why
        self.wait_s = wait_s
        super().__init__(failure)


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0

    def wait(self, attempt: int, asked: float | None) -> float:
        """The wait after failed attempt number ``attempt`` (from 1)."""
        if asked is not None:
            return asked
        return min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)


def retry_after(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """Seconds the server asks us to wait: ``Retry-After: 7`` or an HTTP date; None when absent or unreadable."""
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


async def with_retries(
    attempt: Callable[[int], Awaitable[T]],
    *,
    policy: RetryPolicy,
    sleep: Sleep = asyncio.sleep,
    clock: Clock = time.monotonic,
    deadline: float = math.inf,
    on_retry: Callable[[int, float, str], None] | None = None,
) -> T:
    """``attempt(n)`` until it returns, raises anything but :class:`Retryable`, or the policy gives up."""
    stopped: list[Literal["attempts", "asked_too_long", "deadline"]] = []

    def failure(state: RetryCallState) -> Retryable:
        exc = state.outcome.exception() if state.outcome is not None else None
        assert isinstance(exc, Retryable)
        return exc

    def wait(state: RetryCallState) -> float:
        return policy.wait(state.attempt_number, failure(state).wait_s)

    def stop(state: RetryCallState) -> bool:
        asked = failure(state).wait_s
        if state.attempt_number > policy.retries:
            stopped.append("attempts")
        elif asked is not None and asked > policy.max_backoff_s:
            stopped.append("asked_too_long")
        elif clock() + state.upcoming_sleep >= deadline:
            stopped.append("deadline")
        return bool(stopped)

    def before_sleep(state: RetryCallState) -> None:
        if on_retry is not None:
            on_retry(state.attempt_number, state.upcoming_sleep, failure(state).failure)

    retrying = AsyncRetrying(
        retry=retry_if_exception_type(Retryable),
        wait=wait,
        stop=stop,
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
    number = 0
    try:
        async for trying in retrying:
            with trying:
                number = trying.retry_state.attempt_number
                return await attempt(number)
    except Retryable as exc:
        why = stopped[0] if stopped else "attempts"
        raise GaveUp(exc.failure, attempts=number, why=why, wait_s=policy.wait(number, exc.wait_s)) from exc
    raise AssertionError("tenacity ended without an outcome")  # pragma: no cover
