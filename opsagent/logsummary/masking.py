"""Masking: the variable parts of a log message (numbers, ids, addresses, times…) become placeholders.

A message becomes a sequence of tokens split on whitespace, each either kept as written or masked
(``<NUM>``, ``<IP>``, ``<UUID>``…), and the raw tokens at the same positions, so a template's
variable positions can report the values they held. A mask never spans two tokens, except the few
variables written with a space inside (``1190 bytes (1.16 KB)``, ``Sun Jul 3 10:05:25 2005``,
``12 ms``), which become one token. The same masking applies to every system: nothing here is
tuned to a particular log source.
"""

from __future__ import annotations

import re

#: Only the first line of a message is mined (a stack trace's frames are not its template), and
#: only this many characters of it.
MAX_LINE = 4096

_WEEKDAYS = frozenset(
    d + suffix for d in ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun") for suffix in ("", "day", ",", "day,")
) | frozenset(("Tuesday", "Wednesday", "Thursday", "Saturday", "Tuesday,", "Wednesday,", "Thursday,", "Saturday,"))
_MONTHS = frozenset(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Sept", "Oct", "Nov", "Dec"))
_DURATION_UNITS = frozenset(
    (
        *("ms", "msec", "msecs", "millis", "millisecond", "milliseconds", "us", "µs", "ns", "s", "sec", "secs"),
        *("second", "seconds", "min", "mins", "minute", "minutes", "h", "hr", "hrs", "hour", "hours", "day", "days"),
    )
)
_SIZE_UNITS = frozenset(("bytes", "B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"))
_UNITS = _DURATION_UNITS | _SIZE_UNITS
_TRAILING = ")]},;:."
#: Tokens that can be part of a variable written with a space inside: a cheap test before looking.
_SPACED_WORDS = frozenset({u + p for u in _UNITS for p in ("", *_TRAILING, "),", ");", "].")} | _MONTHS | _WEEKDAYS)
_NUM_UNIT = r"(?:ms|us|µs|ns|s|m|h|d|k|kb|mb|gb|kib|mib|gib|b)"
#: A whole token that is a number, perhaps with a unit, wrapped in punctuation: the common case.
_NUMBER = re.compile(r"([^\w<-]*)-?\d+(?:\.\d+)?(" + _NUM_UNIT + r")?([^\w<]*)", re.I)

#: Where a number or hex id may start and end: not inside a word, but "_" separates (blk_123, ord_9f3c)
_B = r"(?<![A-Za-z0-9])"
_E = r"(?![A-Za-z0-9])"

#: Masks applied inside one token, in order, each only where its hint occurs ("" always) and, when
#: the last field says so, only in tokens with a digit.
_MASKS: list[tuple[re.Pattern[str], str, str, bool]] = [
    (re.compile(r"[a-z][a-z0-9+.-]*://[^\s\"'<>]+", re.I), "<URL>", "://", False),
    # a path swallows what looks like an id or an address inside it: /orders/<uuid> is one path
    (re.compile(r"(?<![\w/.])(?:/[\w.@%+~-]+){2,}/?"), "<PATH>", "/", False),
    (re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"), "<EMAIL>", "@", False),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<UUID>", "-", True),
    (re.compile(r"(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}:\d+\b"), "<ADDR>", ":", True),
    # host:port; lower case only, so Java's Class.method:line stays a constant
    (re.compile(r"(?<![\w.])(?:[a-z0-9-]+\.)+[a-z]{2,}:\d+\b"), "<ADDR>", ":", True),
    (re.compile(r"(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}\b(?!\.\d)"), "<IP>", ".", True),
    (re.compile(r"\b(?:[0-9a-f]{1,4}:){4,7}[0-9a-f]{1,4}\b", re.I), "<IP>", ":", True),
    (re.compile(r"\b[A-Za-z]:\\[^\s\"']+"), "<PATH>", ":\\", False),
    (
        re.compile(r"\b\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"),
        "<DATE>",
        "-",
        True,
    ),
    (re.compile(r"(?<![\d:])\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?(?![\d:])"), "<TIME>", ":", True),
    (
        re.compile(
            _B + r"(?:0x[0-9a-f]+|[0-9a-f]*\d[0-9a-f]*[a-f][0-9a-f]*|[0-9a-f]*[a-f][0-9a-f]*\d[0-9a-f]*)" + _E, re.I
        ),
        "<HEX>",
        "",
        True,
    ),
    (re.compile(r"\b(?:true|false|null|nil)\b", re.I), "<BOOL>", "", False),
    (
        re.compile(r"(?:(?<![\w.])-)?" + _B + r"\d+(?:\.\d+)*(?:e[-+]?\d+)?" + _NUM_UNIT + "?" + _E, re.I),
        "<NUM>",
        "",
        True,
    ),
]

#: A token with nothing a mask could match: no digit, no path, address, URL or boolean.
_PLAIN = re.compile(r"[^\d/@:\\]*\Z")
_BOOLEAN = re.compile(r"true|false|null|nil", re.I)
_DIGIT = re.compile(r"\d")
#: Something a user name can be, after the word "user".
_USER = re.compile(r"[A-Za-z][\w.-]*\Z")
#: Marks the space inside a spaced variable while the line is split into tokens.
_PLACEHOLDER = re.compile(r"<(?:[A-Z]+|\*)>")


def is_masked(token: str) -> bool:
    """Whether the token holds a mask or a wildcard (``<NUM>``, ``blk_<NUM>``, ``<*>``)."""
    return "<" in token and _PLACEHOLDER.search(token) is not None


def mask_token(token: str) -> str:
    """One token with its variable parts masked."""
    if token.isdecimal():
        return "<NUM>"
    digit = _DIGIT.search(token) is not None
    if not digit:
        if _PLAIN.match(token) and not _BOOLEAN.search(token):
            return token
    elif (m := _NUMBER.fullmatch(token)) and m[2] not in ("b", "d", "B", "D"):  # 5d, 10b are hex
        return f"{m[1]}<NUM>{m[3]}"
    else:
        key, eq, value = token.partition("=")
        if eq and "://" not in token:
            # no pattern matches across "=": mask each side (and hit the cache more often)
            return f"{mask_token(key) if key else key}={mask_token(value) if value else value}"
        core = token.strip(_WRAPPING)
        kind = _kind(core) if core else None
        if kind is not None:
            start = token.index(core)
            return token[:start] + kind + token[start + len(core) :]
    for pattern, placeholder, hint, needs_digit in _MASKS:
        if hint in token and (digit or not needs_digit):
            token = pattern.sub(placeholder, token)
    return token


_WRAPPING = "\"'()[]{},;:"
_HEXDIGITS = frozenset("0123456789abcdefABCDEF")
_PATH = re.compile(r"(?:/[\w.@%+~-]+){2,}/?")


def _kind(core: str) -> str | None:
    """The mask of a token's core (the token without wrapping punctuation) when it is one variable
    that cheap tests recognise: the common cases, with the result the patterns would give."""
    if core.isdecimal():
        return "<NUM>"
    if core[0] == "/":
        return "<PATH>" if _PATH.fullmatch(core) else None
    if _HEXDIGITS.issuperset(core):
        # the HEX pattern's condition: a digit and a letter a-f
        return "<HEX>" if not core.isalpha() else None
    host, colon, port = core.partition(":")
    parts = host.split(".")
    if len(parts) == 4 and all(p.isdecimal() and len(p) <= 3 for p in parts):
        return "<IP>" if not colon else "<ADDR>" if port.isdecimal() else None
    if len(core) == 36 and core[8] == core[13] == core[18] == core[23] == "-":
        return "<UUID>" if _HEXDIGITS.issuperset(core.replace("-", "")) else None
    return None


class Masker:
    """Masks messages into tokens, remembering the tokens it has masked (a bounded cache)."""

    def __init__(self, *, cache_size: int = 100_000) -> None:
        self.cache_size = cache_size
        self._tokens: dict[str, str] = {}

    def tokens(self, message: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The masked tokens of the message's first line, and the raw tokens at the same positions."""
        raw = message.partition("\n")[0][:MAX_LINE].split()
        cache = self._tokens
        masked = [cache.get(token) for token in raw]
        if None in masked:
            for k, m in enumerate(masked):
                if m is None:
                    masked[k] = self.token(raw[k])
        done: list[str] = masked  # type: ignore[assignment]  # no None left
        if "user" in raw or "User" in raw:
            for k in range(1, len(raw)):
                if raw[k - 1] in ("user", "User") and done[k] == raw[k] and _USER.match(raw[k]):
                    done[k] = "<USER>"
        if not _SPACED_WORDS.isdisjoint(raw) or "<DATE>" in done:
            return _join_spaced(done, raw)
        return tuple(done), tuple(raw)

    def token(self, token: str) -> str:
        """:func:`mask_token`, remembered."""
        m = self._tokens.get(token)
        if m is None:
            m = mask_token(token)
            if len(self._tokens) >= self.cache_size:
                self._tokens.clear()
            self._tokens[token] = m
        return m


def _join_spaced(masked: list[str], raw: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Variables written with a space inside become one token: ``12 ms``, ``1190 bytes (1.16 KB)``,
    ``Sun Jul 3 10:05:25 2005``, ``2026-03-17 14:05:21``."""
    out_masked: list[str] = []
    out_raw: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        end, placeholder = _spaced_variable(masked, raw, i)
        if end > i + 1:
            first, last = masked[i], masked[end - 1]
            prefix = first[: first.index("<")] if first.find("<") > 0 else ""
            suffix = last[last.rindex(">") + 1 :] if ">" in last else last[len(last.rstrip(_TRAILING)) :]
            if masked[i + 1 : end].count("(<NUM>") and suffix.startswith(")"):
                suffix = suffix[1:]  # the closing parenthesis belongs to the variable: (1.16 KB)
            out_masked.append(prefix + placeholder + suffix)
            out_raw.append(" ".join(raw[i:end]))
            i = end
        else:
            out_masked.append(masked[i])
            out_raw.append(raw[i])
            i += 1
    return tuple(out_masked), tuple(out_raw)


def _spaced_variable(masked: list[str], raw: list[str], i: int) -> tuple[int, str]:
    """Where a variable starting at token ``i`` ends (``i`` when none starts there), and its mask."""
    n = len(raw)
    token = raw[i]
    if token in _WEEKDAYS and i + 2 < n and raw[i + 1] in _MONTHS and raw[i + 2].isdigit():
        end = i + 3
        if end < n and masked[end].startswith("<TIME>"):
            end += 1
            if end < n and raw[end].rstrip(_TRAILING).isdigit() and len(raw[end].rstrip(_TRAILING)) == 4:
                end += 1
        return end, "<DATE>"
    if token in _MONTHS and i + 2 < n and raw[i + 1].isdigit() and masked[i + 2].startswith("<TIME>"):
        return i + 3, "<DATE>"
    m = masked[i]
    if m == "<DATE>" and i + 1 < n and masked[i + 1].startswith("<TIME>"):
        return i + 2, "<DATE>"
    if m.endswith("<NUM>") and i + 1 < n:
        unit = raw[i + 1].rstrip(_TRAILING)
        if unit in _DURATION_UNITS:
            return i + 2, "<DURATION>"
        if unit in _SIZE_UNITS:
            # 1190 bytes (1.16 KB)
            inner = raw[i + 3].rstrip(_TRAILING) if i + 3 < n else ""
            if inner in _SIZE_UNITS and masked[i + 2] == "(<NUM>" and raw[i + 3][len(inner) :].startswith(")"):
                return i + 4, "<SIZE>"
            return i + 2, "<SIZE>"
    if m.startswith("<<NUM>") and i + 1 < n and raw[i + 1].rstrip(_TRAILING) in _DURATION_UNITS:
        return i + 2, "<DURATION>"  # lifetime <1 sec
    return i, ""


_DEFAULT = Masker()


def mask(message: str) -> str:
    """The first line of the message with its variable parts masked, tokens separated by one space."""
    return " ".join(_DEFAULT.tokens(message)[0])
