"""Log summaries: what a strong SRE would read instead of ten thousand raw lines.

The :class:`Summariser` interface takes log records and the incident's baseline and window and
returns a :class:`~opsagent.models.LogsData`: exact counts by level, service and keyword family,
templates with counts and first/last seen, what is new or bursting, and a few whole samples.
``SimpleSummariser`` masks variable tokens and groups identical masks; it never truncates text.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from opsagent.models import LogsData, LogTemplate, TimeRange

#: Keyword families counted exactly. Names are stable: playbooks refer to them.
FAMILIES: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern, re.I)
    for name, pattern in {
        "timeout": r"timed?[ -]?out|deadline exceeded|SocketTimeout",
        "refused": r"refused|ECONNREFUSED",
        "reset": r"connection reset|ECONNRESET|broken pipe",
        "oom": r"out ?of ?memory|OutOfMemoryError|OOMKilled|oom[-_ ]kill",
        "exception": r"exception|traceback|panic:|\n\s+at |stack ?trace",
        "deadlock": r"deadlock",
        "5xx": r"\b(?:status|HTTP|code|returned)[=: /]*5\d\d\b|\b50[234] ",
        "auth": r"unauthori[sz]ed|forbidden|authentication fail|invalid (?:jwt|token)|token (?:expired|used before)",
        "pool": r"pool exhausted|connection is not available|RejectedExecution|queue (?:is )?full|too many connections",
        "disk": r"no space left|disk (?:is )?full|ENOSPC|read-only file system",
        "tls": r"x509|certificate|tls handshake|ssl(?:handshake)?exception|PKIX",
        "dns": r"no such host|name resolution|NXDOMAIN|could not resolve|UnknownHostException|SERVFAIL"
        r"|name or service not known|temporary failure in name",
        "ratelimit": r"rate[- ]limit|too many requests|\b429\b|quota",
        "gc": r"\bGC\b|garbage collect|stop-the-world|safepoint",
        "eviction": r"evict|maxmemory|cache full",
        "slowquery": r"slow query|statement timeout|canceling statement|seq scan|lock wait"
        r"|duration: [\d.]+ ms\s+(?:statement|execute)",
    }.items()
}

_LEVELS = {
    "error": "error",
    "err": "error",
    "e": "error",
    "fatal": "fatal",
    "crit": "fatal",
    "critical": "fatal",
    "panic": "fatal",
    "warn": "warn",
    "warning": "warn",
    "w": "warn",
    "info": "info",
    "i": "info",
    "notice": "info",
    "debug": "debug",
    "d": "debug",
    "trace": "debug",
}

#: (pattern, replacement, a substring every match contains: the pattern only runs where it occurs)
_MASKS = [
    (re.compile(r"[a-z]+://\S+", re.I), "<URL>", "://"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<UUID>", "-"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<IP>", "."),
    (re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+"), "<EMAIL>", "@"),
    (re.compile(r"(?<![\w/])/[\w.-]+(?:/[\w.-]+)+"), "<PATH>", "/"),
    (
        re.compile(r"\b(?:0x)?[0-9a-f]*\d[0-9a-f]*[a-f][0-9a-f]*\b|\b[0-9a-f]*[a-f][0-9a-f]*\d[0-9a-f]*\b", re.I),
        "<HEX>",
        "",
    ),
    (re.compile(r"[-+]?\b\d+(?:\.\d+)?(?:ms|us|µs|ns|s|m|h|%|kb|mb|gb|b)?\b", re.I), "<NUM>", ""),
]


def normalise_level(level: str) -> str:
    lv = level.strip().lower()
    if lv.isdigit():  # syslog severity
        n = int(lv)
        return "fatal" if n <= 2 else "error" if n == 3 else "warn" if n == 4 else "info" if n <= 6 else "debug"
    return _LEVELS.get(lv, lv or "unknown")


_DIGIT = re.compile(r"\d")


def mask(message: str) -> str:
    text = message.split("\n", 1)[0].strip()
    if not _DIGIT.search(text):
        return text if "://" not in text and "@" not in text and "/" not in text else _mask_all(text)
    return _mask_all(text)


def _mask_all(text: str) -> str:
    for pattern, token, hint in _MASKS:
        if hint in text:
            text = pattern.sub(token, text)
    return text


#: Families that name what went wrong more precisely than "an exception was thrown".
_SPECIFIC = frozenset(
    {"timeout", "refused", "reset", "oom", "pool", "disk", "tls", "dns", "deadlock", "ratelimit", "5xx", "auth"}
)

#: Cheap lower-case substrings, one of which every match of the family's pattern contains: the
#: regular expression only runs on lines that pass this filter.
_HINTS: dict[str, tuple[str, ...]] = {
    "timeout": ("time", "deadline"),
    "refused": ("refused",),
    "reset": ("reset", "broken pipe"),
    "oom": ("memory", "oom"),
    "exception": ("exception", "traceback", "panic:", "\n", "stack"),
    "deadlock": ("deadlock",),
    "5xx": ("5",),
    "auth": ("unauthori", "forbidden", "authentication", "jwt", "token"),
    "pool": ("pool", "not available", "rejectedexecution", "queue", "too many connections"),
    "disk": ("space", "disk", "enospc", "read-only"),
    "tls": ("x509", "certificate", "tls", "ssl", "pkix"),
    "dns": ("no such host", "resolution", "nxdomain", "resolve", "unknownhost", "servfail", "not known", "name"),
    "ratelimit": ("rate", "too many requests", "429", "quota"),
    "gc": ("gc", "garbage", "stop-the-world", "safepoint"),
    "eviction": ("evict", "maxmemory", "cache full"),
    "slowquery": ("slow query", "statement", "seq scan", "lock wait", "duration:"),
}


_FAMILIES_OF_HINT: dict[str, list[str]] = {}
for _family, _hints in _HINTS.items():
    for _hint in _hints:
        _FAMILIES_OF_HINT.setdefault(_hint, []).append(_family)


def families_of(message: str) -> list[str]:
    """Every keyword family the message belongs to; a timeout exception is a timeout, not an exception."""
    lower = message.lower()
    hinted = {f for hint, fams in _FAMILIES_OF_HINT.items() if hint in lower for f in fams}
    found = [name for name, pattern in FAMILIES.items() if name in hinted and pattern.search(message)]
    if "exception" in found and _SPECIFIC.intersection(found):
        found.remove("exception")
    return found


class LogLike(Protocol):
    @property
    def ts(self) -> datetime: ...
    @property
    def service(self) -> str: ...
    @property
    def level(self) -> str: ...
    @property
    def message(self) -> str: ...


class Summariser(Protocol):
    def summarise(
        self, records: Iterable[LogLike], *, baseline: TimeRange, window: TimeRange, service: str | None
    ) -> LogsData: ...


@dataclass
class _Template:
    text: str
    count: int = 0
    baseline: int = 0
    window: int = 0
    first: datetime | None = None
    last: datetime | None = None
    levels: Counter[str] = field(default_factory=Counter)
    services: Counter[str] = field(default_factory=Counter)
    sample: str = ""


_SEVERITY = {"fatal": 0, "error": 1, "warn": 2, "info": 3, "debug": 4}


class SimpleSummariser:
    """Mask-and-group summariser. Exact counts; keeps every template up to ``max_templates`` shown."""

    def __init__(self, *, max_templates: int = 15, samples: int = 3, burst_ratio: float = 3.0) -> None:
        self.max_templates = max_templates
        self.samples = samples
        self.burst_ratio = burst_ratio
        # The same records are summarised for several scopes (all services, then each one).
        self._parsed: dict[str, tuple[str, list[str]]] = {}

    def _parse(self, message: str) -> tuple[str, list[str]]:
        hit = self._parsed.get(message)
        if hit is None:
            hit = (mask(message), families_of(message))
            if len(self._parsed) < 500_000:
                self._parsed[message] = hit
        return hit

    def summarise(
        self, records: Iterable[LogLike], *, baseline: TimeRange, window: TimeRange, service: str | None
    ) -> LogsData:
        templates: dict[str, _Template] = {}
        by_level: Counter[str] = Counter()
        by_service: Counter[str] = Counter()
        fam_window: Counter[str] = Counter()
        fam_base: Counter[str] = Counter()
        total = 0
        for rec in records:
            in_window = window.contains(rec.ts)
            in_base = baseline.contains(rec.ts)
            if not (in_window or in_base):
                continue
            total += 1
            level = normalise_level(rec.level)
            if in_window:
                by_level[level] += 1
                by_service[rec.service] += 1
            key, fams = self._parse(rec.message)
            (fam_window if in_window else fam_base).update(fams)
            tpl = templates.get(key)
            if tpl is None:
                tpl = templates[key] = _Template(text=key, sample=rec.message)
            tpl.count += 1
            tpl.window += in_window
            tpl.baseline += in_base
            tpl.first = rec.ts if tpl.first is None or rec.ts < tpl.first else tpl.first
            tpl.last = rec.ts if tpl.last is None or rec.ts > tpl.last else tpl.last
            tpl.levels[level] += 1
            tpl.services[rec.service] += 1
        rate_scale = window.minutes / max(baseline.minutes, 1e-9)
        out: list[LogTemplate] = []
        for key, tpl in templates.items():
            assert tpl.first is not None and tpl.last is not None
            expected = tpl.baseline * rate_scale
            new = tpl.baseline == 0 and tpl.window >= 3
            bursting = tpl.window >= 5 and tpl.window >= self.burst_ratio * max(expected, 1.0)
            out.append(
                LogTemplate(
                    id="t" + hashlib.sha1(key.encode()).hexdigest()[:8],
                    template=key,
                    count=tpl.count,
                    baseline_count=tpl.baseline,
                    window_count=tpl.window,
                    first_seen=tpl.first,
                    last_seen=tpl.last,
                    levels=sorted(tpl.levels, key=lambda lv: _SEVERITY.get(lv, 5)),
                    services=[s for s, _ in tpl.services.most_common(5)],
                    sample=tpl.sample,
                    new=new,
                    bursting=bursting,
                )
            )
        out.sort(key=_information_order)
        shown = out[: self.max_templates]
        return LogsData(
            service=service,
            total=total,
            by_level=dict(by_level.most_common()),
            by_service=dict(by_service.most_common()),
            families=dict(fam_window.most_common()),
            baseline_families=dict(fam_base.most_common()),
            templates=shown,
            samples=[t.sample for t in shown[: self.samples]],
        )


def _information_order(t: LogTemplate) -> tuple[int, int, int, str]:
    worst = min((_SEVERITY.get(lv, 5) for lv in t.levels), default=5)
    novelty = 0 if t.new else 1 if t.bursting else 2
    return (worst if worst <= 2 else 3, novelty, -t.window_count, t.id)
