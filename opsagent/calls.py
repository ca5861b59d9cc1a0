"""What one tool call carries down to the adapters under it, without widening the source protocols.

The toolbox opens a :func:`tool_call` around every call it makes. Under it:

- :func:`remaining_s` is the time the call has left: the smaller of its per-call timeout and what
  the investigation's wall-clock budget still holds. A blocking client that runs in a worker
  thread (prometheus-api-client over requests) bounds each request by it, so a call the toolbox
  gave up on does not keep its thread, and the process, waiting past the investigation's end.
- :func:`report_partial` puts the failure of one instance of a kind into the call's ledger when
  another instance of that kind answered (two Prometheus, one down): the toolbox names it in the
  report beside the sources that could not be read at all.

Both are context variables: asyncio tasks and ``asyncio.to_thread`` carry them along. Outside a
tool call there is no deadline, and a partial failure is only logged.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import structlog

from opsagent.errors import SourceError

log = structlog.get_logger("opsagent.adapters")

_deadline: ContextVar[float | None] = ContextVar("opsagent_call_deadline", default=None)
_ledger: ContextVar[list[SourceError] | None] = ContextVar("opsagent_call_ledger", default=None)


@contextmanager
def tool_call(*, seconds: float | None) -> Iterator[list[SourceError]]:
    """One tool call of at most ``seconds`` (None: no deadline); yields the ledger of instances that
    failed under it."""
    ledger: list[SourceError] = []
    deadline = _deadline.set(None if seconds is None else time.monotonic() + seconds)
    failures = _ledger.set(ledger)
    try:
        yield ledger
    finally:
        _deadline.reset(deadline)
        _ledger.reset(failures)


def remaining_s() -> float | None:
    """Seconds the current tool call has left (never below zero); None outside a tool call."""
    deadline = _deadline.get()
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


def bounded(timeout_s: float | None) -> float | None:
    """A client timeout no longer than what the current tool call has left (at least 1 ms, so a
    spent call fails at once instead of meaning "no timeout")."""
    left = remaining_s()
    if left is None:
        return timeout_s
    left = max(left, 0.001)
    return left if timeout_s is None else min(timeout_s, left)


def report_partial(failure: SourceError) -> None:
    """An instance failed while another of its kind answered: into the call's ledger."""
    ledger = _ledger.get()
    if ledger is None:
        log.warning("adapter.partial", failed=failure.source, error=str(failure))
    else:
        ledger.append(failure)
