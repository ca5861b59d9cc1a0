"""Log questions for an incident: the period after onset, and the ``text`` filter of a summary.

Shared by the replay and live log sources (the summary itself is :mod:`opsagent.logsummary`).
"""

from __future__ import annotations

import re

from opsagent.errors import QueryRejected
from opsagent.models import Incident, TimeRange


def post_onset(incident: Incident) -> TimeRange:
    return TimeRange(start=incident.onset, end=incident.window.end)


def text_pattern(text: str, *, source: str) -> re.Pattern[str]:
    """The ``text`` argument of ``logs.summary``: a case-insensitive regular expression."""
    try:
        return re.compile(text, re.I)
    except re.error as exc:
        raise QueryRejected(f"bad log text pattern: {exc}", source=source, query=text) from exc
