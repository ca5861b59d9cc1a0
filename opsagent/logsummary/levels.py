"""Log levels: the many spellings of a severity, reduced to fatal, error, warn, info, debug.

Spellings come from every logging library in a fleet (``W``, ``WRN``, ``warning``, ``Warn``), from
syslog severities (0–7) and from pino/bunyan numbers (10–60). A spelling nobody recognises becomes
``unknown`` rather than a sixth level: callers count it as an oddity.
"""

from __future__ import annotations

#: Normalised levels, most severe first.
LEVELS: tuple[str, ...] = ("fatal", "error", "warn", "info", "debug")
UNKNOWN = "unknown"

#: Position in :data:`LEVELS`; unknown sorts after debug.
SEVERITY: dict[str, int] = {level: i for i, level in enumerate(LEVELS)}

_SPELLINGS: dict[str, str] = {
    **dict.fromkeys(("fatal", "f", "crit", "critical", "crt", "panic", "emerg", "emergency", "alert", "ftl"), "fatal"),
    **dict.fromkeys(("error", "err", "e", "eror", "severe", "erro"), "error"),
    **dict.fromkeys(("warn", "warning", "w", "wrn", "wrng"), "warn"),
    **dict.fromkeys(("info", "i", "inf", "information", "informational", "notice", "log", "note"), "info"),
    **dict.fromkeys(("debug", "d", "dbg", "trace", "trc", "verbose", "v", "fine", "finer", "finest"), "debug"),
}

#: Syslog severity (RFC 5424): 0 emergency … 7 debug.
_SYSLOG = ("fatal", "fatal", "fatal", "error", "warn", "info", "info", "debug")


def _numeric(n: int) -> str:
    if n < len(_SYSLOG):
        return _SYSLOG[n]
    # pino / bunyan: 10 trace, 20 debug, 30 info, 40 warn, 50 error, 60 fatal
    return "fatal" if n >= 60 else "error" if n >= 50 else "warn" if n >= 40 else "info" if n >= 30 else "debug"


def normalise_level(level: str) -> str:
    """``fatal``, ``error``, ``warn``, ``info``, ``debug``, or ``unknown``."""
    lv = level.strip().strip("[]<>()").lower()
    if lv.isascii() and lv.isdigit():
        return _numeric(int(lv))
    return _SPELLINGS.get(lv, UNKNOWN)
