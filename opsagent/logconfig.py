"""structlog set-up: readable lines on stderr in a terminal, JSON in the service. Events are data.

Every event is redacted before it is rendered (:func:`redacted`): a value that carries a foreign
system's text (an error body, a log line) never writes a secret into a log.
"""

from __future__ import annotations

import logging
import sys

import structlog
from structlog.typing import EventDict, WrappedLogger

from opsagent.redaction import scrub_model


def redacted(_: WrappedLogger, __: str, event: EventDict) -> EventDict:
    """A structlog processor: every string of the event, secrets masked."""
    return scrub_model(event)


def configure(*, level: str = "warning", json: bool = False) -> None:
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redacted,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        # Resolved at each use, so a replaced sys.stderr (tests, daemons) is honoured.
        logger_factory=lambda *_: structlog.PrintLogger(sys.stderr),
        cache_logger_on_first_use=False,
    )
