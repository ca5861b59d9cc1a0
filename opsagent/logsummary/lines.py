"""Raw log lines to records: JSON lines, logfmt, or plain text with a leading timestamp and level.

For sources that hand over text rather than structured records (files, ``kubectl logs``, syslog).
It never raises on a line: bytes that are not UTF-8, lines over 64 KiB, a JSON object that does not
close, a line without a timestamp or a level all become records (an indented line without a
timestamp continues the previous record: a stack frame), and each oddity is counted in ``counts``.
It does not summarise anything.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

MAX_LINE_BYTES = 64 * 1024

_TS_KEYS = ("ts", "time", "timestamp", "@timestamp", "t", "date", "datetime", "eventTime")
_LEVEL_KEYS = ("level", "lvl", "severity", "levelname", "log.level", "loglevel", "severity_text", "SeverityText")
_MESSAGE_KEYS = ("message", "msg", "log", "text", "event", "body", "Body")
_SERVICE_KEYS = ("service", "service.name", "app", "application", "service_name")
_TRACE_KEYS = ("trace_id", "traceId", "trace.id", "traceid", "TraceId")

_LEVEL_WORDS = (
    r"TRACE|DEBUG|DBG|INFO|INF|NOTICE|WARN|WARNING|WRN|ERROR|ERR|CRIT|CRITICAL|FATAL|PANIC|SEVERE|EMERG|ALERT"
)
_ISO = re.compile(r"\[?(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\]?\s*")
_SYSLOG = re.compile(r"((?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} \d{2}:\d{2}:\d{2})\s+")
_EPOCH = re.compile(r"(\d{10}(?:\.\d+)?|\d{13})\s+")
_GLOG = re.compile(r"([IWEF])(\d{2})(\d{2}) (\d{2}:\d{2}:\d{2}(?:\.\d+)?)\s+")
_LEVEL = re.compile(r"[\[<(]?(" + _LEVEL_WORDS + r")[\]>)]?:?\s+", re.I)
_LETTER_LEVEL = re.compile(r"\[?([IWEDF])\]?\s+")
#: key=value pairs, each key starting a token (so a long line without "=" is scanned once, not once per
#: character)
_LOGFMT = re.compile(r'(?<!\S)([\w.@-]+)=("(?:[^"\\]|\\.)*"|[^\s"]*)')
_CONTINUATION = re.compile(r"\s|Caused by:|\.\.\. \d+ more")


@dataclass(frozen=True, slots=True)
class LogLine:
    ts: datetime
    service: str
    level: str
    message: str
    trace_id: str | None = None


class LineParser:
    """Parses raw lines into :class:`LogLine` records, counting what was odd about them."""

    def __init__(self, *, service: str = "unknown", default_ts: datetime, max_bytes: int = MAX_LINE_BYTES) -> None:
        self.service = service
        self.default_ts = default_ts if default_ts.tzinfo else default_ts.replace(tzinfo=UTC)
        self.max_bytes = max_bytes
        self.counts: Counter[str] = Counter()

    def parse(self, lines: Iterable[str | bytes]) -> Iterator[LogLine]:
        pending: LogLine | None = None
        last_ts = self.default_ts
        for raw in lines:
            self.counts["lines"] += 1
            line = self._decode(raw)
            if not line.strip():
                self.counts["empty"] += 1
                continue
            if pending is not None and _CONTINUATION.match(line) and not _ISO.match(line.lstrip()):
                self.counts["continuation"] += 1
                joined = pending.message + "\n" + line
                pending = replace(pending, message=joined[: self.max_bytes])
                continue
            try:
                record = self._record(line, last_ts)
            except Exception:  # a parser bug must cost one line, never the summary
                self.counts["unparsable"] += 1
                record = LogLine(ts=last_ts, service=self.service, level="", message=line)
            last_ts = record.ts
            if pending is not None:
                yield pending
            pending = record
        if pending is not None:
            yield pending

    def _decode(self, raw: str | bytes) -> str:
        if isinstance(raw, bytes):
            if len(raw) > self.max_bytes:
                self.counts["oversized"] += 1
                raw = raw[: self.max_bytes]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                self.counts["non_utf8"] += 1
                text = raw.decode("utf-8", errors="replace")
        else:
            text = raw
            if len(text) > self.max_bytes:
                self.counts["oversized"] += 1
                text = text[: self.max_bytes]
        return text.rstrip("\r\n")

    def _record(self, line: str, last_ts: datetime) -> LogLine:
        stripped = line.strip()
        if stripped.startswith("{"):
            try:
                obj = json.loads(stripped)
            except ValueError:
                self.counts["bad_json"] += 1
            else:
                if isinstance(obj, dict):
                    self.counts["json"] += 1
                    return self._fields(_flatten(obj), last_ts, line)
                self.counts["bad_json"] += 1
        pairs = _LOGFMT.findall(stripped) if "=" in stripped else []
        if len(pairs) >= 2 and any(k in ("level", "msg", "ts", "time", "lvl") for k, _ in pairs):
            self.counts["logfmt"] += 1
            return self._fields({k: _unquote(v) for k, v in pairs}, last_ts, line)
        self.counts["plain"] += 1
        return self._plain(stripped, last_ts)

    def _fields(self, fields: dict[str, Any], last_ts: datetime, line: str) -> LogLine:
        ts = self._timestamp(_first(fields, _TS_KEYS), last_ts)
        level = _first(fields, _LEVEL_KEYS)
        if level is None:
            self.counts["no_level"] += 1
        message = _first(fields, _MESSAGE_KEYS)
        if message is None:
            self.counts["no_message"] += 1
        trace = _first(fields, _TRACE_KEYS)
        return LogLine(
            ts=ts,
            service=str(_first(fields, _SERVICE_KEYS) or self.service),
            level=str(level) if level is not None else "",
            message=str(message) if message is not None else line,
            trace_id=str(trace) if trace is not None else None,
        )

    def _plain(self, line: str, last_ts: datetime) -> LogLine:
        ts: datetime | None = None
        level = ""
        rest = line
        if m := _ISO.match(rest):
            ts = self._timestamp(m.group(1), last_ts)
            rest = rest[m.end() :]
        elif m := _GLOG.match(rest):
            level = m.group(1)
            ts = self._timestamp(f"{last_ts.year}-{m.group(2)}-{m.group(3)}T{m.group(4)}", last_ts)
            rest = rest[m.end() :]
        elif m := _SYSLOG.match(rest):
            ts = self._timestamp(f"{last_ts.year} {m.group(1)}", last_ts, fmt="%Y %b %d %H:%M:%S")
            rest = rest[m.end() :]
        elif m := _EPOCH.match(rest):
            ts = self._timestamp(float(m.group(1)), last_ts)
            rest = rest[m.end() :]
        found_ts = ts is not None
        if ts is None:
            self.counts["no_timestamp"] += 1
            ts = last_ts
        if not level:
            m = _LEVEL.match(rest) or (_LETTER_LEVEL.match(rest) if found_ts else None)
            if m:
                level, rest = m.group(1), rest[m.end() :]
        if not level:
            self.counts["no_level"] += 1
        return LogLine(ts=ts, service=self.service, level=level, message=rest)

    def _timestamp(self, value: Any, last_ts: datetime, fmt: str | None = None) -> datetime:
        if value is None:
            self.counts["no_timestamp"] += 1
            return last_ts
        try:
            if isinstance(value, int | float) or (isinstance(value, str) and _is_number(value)):
                return _from_epoch(float(value))
            text = str(value).replace(",", ".")
            ts = datetime.strptime(text, fmt) if fmt else datetime.fromisoformat(text)
        except (ValueError, OverflowError, OSError):
            self.counts["bad_timestamp"] += 1
            return last_ts
        if ts.tzinfo is None:
            self.counts["naive_timestamp"] += 1
            ts = ts.replace(tzinfo=UTC)
        return ts


def _from_epoch(value: float) -> datetime:
    # seconds, milliseconds, microseconds or nanoseconds, told apart by magnitude
    for scale in (1, 1e3, 1e6, 1e9):
        if value / scale < 1e11:
            return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=value / scale)
    raise ValueError(f"not an epoch time: {value}")


def _is_number(text: str) -> bool:
    return text.replace(".", "", 1).isdigit()


def _flatten(obj: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"log": {"level": "x"}}`` also answers to ``log.level`` (Elastic Common Schema)."""
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and not prefix:
            out.update(_flatten(value, name + "."))
            if "name" in value and name not in out:
                out[name] = value["name"]
        else:
            out[name] = value
    return out


def _first(fields: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = fields.get(key)
        if value is not None and value != "":
            return value
    return None


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('\\"', '"')
    return value
