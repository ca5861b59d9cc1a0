"""Keyword families: what went wrong, named the way playbooks name it (timeout, refused, oom, …).

Counted exactly on every line. Family names are stable: playbooks and triage features refer to
them. This module only classifies a message; it keeps no state.
"""

from __future__ import annotations

import re

from ahocorasick_rs import AhoCorasick

#: Keyword families counted exactly. Names are stable: playbooks refer to them.
FAMILIES: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern, re.I)
    for name, pattern in {
        "timeout": r"timed?[ -]?out|deadline exceeded|SocketTimeout",
        "refused": r"refused|ECONNREFUSED",
        # a dependency that has nobody to answer: gRPC's Unavailable, a proxy with no healthy upstream, a
        # client-side load balancer whose service discovery lists no instance of the callee
        "unavailable": r"code = Unavailable|no healthy upstream|upstream connect error|service unavailable"
        r"|no instances? available for|does not have available server",
        "reset": r"connection reset|ECONNRESET|broken pipe",
        "oom": r"out ?of ?memory|OutOfMemoryError|OOMKilled|oom[-_ ]kill",
        "exception": r"exception|traceback|panic:|\n\s+at |stack ?trace",
        "deadlock": r"deadlock",
        "5xx": r"\b(?:status|HTTP|code|returned)[=: /]*5\d\d\b|\b50[234] ",
        "auth": r"unauthori[sz]ed|forbidden|authentication fail|access denied|invalid (?:jwt|token)"
        r"|token (?:expired|used before)",
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

#: Families that name what went wrong more precisely than "an exception was thrown".
_SPECIFIC = frozenset(
    {
        "timeout",
        "refused",
        "unavailable",
        "reset",
        "oom",
        "pool",
        "disk",
        "tls",
        "dns",
        "deadlock",
        "ratelimit",
        "5xx",
        "auth",
    }
)

#: Cheap lower-case substrings, one of which every match of the family's pattern contains: the
#: regular expression only runs on lines that pass this filter. Keep them exact: a hint that a
#: match could lack would lose counts.
_HINTS: dict[str, tuple[str, ...]] = {
    "timeout": ("timeout", "time out", "time-out", "timedout", "timed out", "timed-out", "deadline exceeded"),
    "refused": ("refused",),
    "unavailable": (
        "unavailable",
        "no healthy upstream",
        "upstream connect error",
        "no instance available",
        "no instances available",
        "does not have available server",
    ),
    "reset": ("connection reset", "econnreset", "broken pipe"),
    "oom": ("out of memory", "outof memory", "out ofmemory", "outofmemory", "oom"),
    "exception": ("exception", "traceback", "panic:", "\n", "stack"),
    "deadlock": ("deadlock",),
    "5xx": ("status", "http", "code", "returned", "502 ", "503 ", "504 "),
    "auth": (
        "unauthori",
        "forbidden",
        "authentication fail",
        "access denied",
        "invalid jwt",
        "invalid token",
        "token ",
    ),
    "pool": ("pool exhausted", "not available", "rejectedexecution", "queue full", "queue is full", "too many conn"),
    "disk": ("no space left", "disk full", "disk is full", "enospc", "read-only file system"),
    "tls": ("x509", "certificate", "tls handshake", "ssl", "pkix"),
    "dns": ("no such host", "resolution", "nxdomain", "resolve", "unknownhost", "servfail", "not known", "in name"),
    "ratelimit": ("rate-limit", "rate limit", "too many requests", "429", "quota"),
    "gc": ("gc", "garbage collect", "stop-the-world", "safepoint"),
    "eviction": ("evict", "maxmemory", "cache full"),
    "slowquery": ("slow query", "statement timeout", "canceling statement", "seq scan", "lock wait", "duration:"),
}

#: A message's *shape*: the message with every digit written 0. Messages that differ only in their
#: numbers share a shape, and everything computed from a message's digit-free families is the same
#: for its shape; the few families whose patterns name digits (5xx, 429, x509) are checked on the
#: message itself, and only when its shape could match them.
SHAPE = str.maketrans("123456789", "000000000")
_SHAPE_BYTES = bytes.maketrans(b"123456789", b"000000000")
_DIGIT = re.compile(r"\d")
NUMERIC_FAMILIES = frozenset({"5xx", "ratelimit", "tls"})
_ALL = tuple(FAMILIES)
_DIGIT_FREE = tuple(name for name in FAMILIES if name not in NUMERIC_FAMILIES)
_NUMERIC = tuple(name for name in FAMILIES if name in NUMERIC_FAMILIES)
#: The numeric families' patterns over shapes; no quantifier counts in them, so digits map one to one.
#: The numeric families' patterns over shapes (their patterns have no counted quantifiers: each digit
#: in them maps to one digit of the shape).
_SHAPE_PATTERNS = {name: re.compile(FAMILIES[name].pattern.translate(SHAPE), re.I) for name in _NUMERIC}


#: The branches of each numeric family's pattern that can match text holding none of the family's
#: digit-free hints (every other branch holds one of those words), as a shape writes them. Searched
#: instead of the whole pattern in an ASCII shape without those words: the whole pattern (an
#: alternation, case-insensitive, led by a word boundary) is tried at every character of the shape,
#: and nearly every shape is hinted for these families (``000``). Not in other text: there a
#: character such as the long s matches ``s`` without regard to case where no hint holds it.
_DIGIT_BRANCHES = {"5xx": r"\b50[234] ", "ratelimit": r"\b429\b", "tls": r"x509"}
_SHAPE_DIGIT_BRANCHES = {name: re.compile(branch.translate(SHAPE), re.I) for name, branch in _DIGIT_BRANCHES.items()}


def _hint_table(shaped: bool) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each hint once (as it reads in a shape, if ``shaped``), with the families it opens."""
    table: dict[str, list[str]] = {}
    for name, hints in _HINTS.items():
        for hint in hints:
            table.setdefault(hint.translate(SHAPE) if shaped else hint, []).append(name)
    return tuple((hint, tuple(fams)) for hint, fams in table.items())


_HINT_TABLE = _hint_table(shaped=False)
#: A shape's hints that hold a digit (``429`` reads ``000``, ``502 `` reads ``000 ``): each is looked
#: for on its own, once, because nearly every shape holds them many times over (a run of zeros, every
#: number of three digits or more), and listing each of those matches was most of the search below:
#: 10 of 10 matches a shape on loghub's lines, 56 of 59 on nezha's.
_SHAPE_DIGIT_HINTS = tuple((hint, fams) for hint, fams in _hint_table(shaped=True) if "0" in hint)
_SHAPE_HINT_TABLE = tuple((hint, fams) for hint, fams in _hint_table(shaped=True) if "0" not in hint)
#: Every other hint of a shape found in one pass (Aho-Corasick, overlapping matches: a hint inside or
#: across another is found too), instead of sixty substring searches of the shape: on long lines (a
#: stack trace's first line and its frames) those searches were a fifth of parsing a distinct message.
_SHAPE_HINT_SEARCH = AhoCorasick([hint for hint, _ in _SHAPE_HINT_TABLE])
#: A numeric family's hints that hold no digit: a match without digits contains one of them, so a
#: shape holding none has no digit-free match (``429`` reads ``000`` in a shape, a hint nearly every
#: shape holds, while ``quota`` is rare).
_DIGIT_FREE_HINTS = {name: tuple(h for h in _HINTS[name] if not any(c.isdigit() for c in h)) for name in _NUMERIC}


def shape_of(message: str) -> str:
    """The message's shape (see :data:`SHAPE`)."""
    # ASCII digits never occur inside a multi-byte UTF-8 sequence; bytes.translate is 6x faster
    return message.encode("utf-8", "surrogatepass").translate(_SHAPE_BYTES).decode("utf-8", "surrogatepass")


def families_of(message: str) -> list[str]:
    """Every keyword family the message belongs to; a timeout exception is a timeout, not an exception."""
    lower = message.lower()
    hinted = {f for hint, fams in _HINT_TABLE if hint in lower for f in fams}
    return resolve([n for n in _ALL if n in hinted and FAMILIES[n].search(message) is not None])


def families_of_shape(shape: str) -> tuple[list[str], list[str]]:
    """For a message's shape: the families every message of that shape belongs to, and the numeric
    families a message of that shape might belong to (to check on the message)."""
    lower = shape.lower()
    found = {i for i, _, _ in _SHAPE_HINT_SEARCH.find_matches_as_indexes(lower, overlapping=True)}
    hinted = {f for i in found for f in _SHAPE_HINT_TABLE[i][1]}
    for hint, fams in _SHAPE_DIGIT_HINTS:
        if hint in lower:
            hinted.update(fams)
    sure = [n for n in _DIGIT_FREE if n in hinted and FAMILIES[n].search(shape) is not None]
    maybe = []
    ascii = shape.isascii()
    for n in _NUMERIC:
        if n not in hinted:
            continue
        if any(h in lower for h in _DIGIT_FREE_HINTS[n]):
            # a match without digits is the same text, so the same match, in every message of the shape
            if any(_DIGIT.search(m.group()) is None for m in FAMILIES[n].finditer(shape)):
                sure.append(n)
            elif _SHAPE_PATTERNS[n].search(shape) is not None:
                maybe.append(n)
        elif (_SHAPE_DIGIT_BRANCHES if ascii else _SHAPE_PATTERNS)[n].search(shape) is not None:
            maybe.append(n)
    return resolve(sure), maybe


#: A string every digit-bearing match of a numeric family contains (5xx codes, 429, x509): a
#: message without it cannot match where its shape only might.
_DIGIT_HINTS = {"5xx": "5", "ratelimit": "429", "tls": "509"}


def numeric_families(message: str, candidates: tuple[str, ...]) -> list[str]:
    """Which of the numeric families a message of a shape that could match them does match.

    ``candidates`` are the families its shape might match (:func:`families_of_shape`'s second list):
    the shape holds no match of theirs without digits, so a match in the message holds a digit."""
    return [f for f in candidates if _DIGIT_HINTS[f] in message and _SEARCH.get(f, _search)(f, message)]


def _search(family: str, message: str) -> bool:
    return FAMILIES[family].search(message) is not None


#: The 5xx pattern's two branches without their leading word boundary, for lower-case text. Each
#: starts with a literal the regular-expression engine can look for quickly, where the whole
#: pattern, starting with a word boundary, is tried at every character of the message: the one
#: search that ran on nearly every message (a ``5`` is in nearly every one). Not on shapes: there
#: ``000 `` (a time's milliseconds) ends the pattern's own search at once.
_5XX = (re.compile(r"(?:status|http|code|returned)[=: /]*5\d\d\b"), re.compile(r"50[234] "))


def _by_literals(branches: tuple[re.Pattern[str], ...], pattern: re.Pattern[str], text: str) -> bool:
    """``pattern.search(text) is not None``, where ``branches`` are the pattern's branches that can
    match ``text`` (all of them, or those holding a digit: see numeric_families) without their
    leading word boundary (each before a letter or a digit), found faster in ASCII text.

    In ASCII text, matching without regard to case is matching the lower-cased text, and the word
    boundary means the character before is no word character. A candidate the boundary rejects
    hides no match: one would have to start inside it, after a letter of its keyword or at a
    character that is no keyword's first.
    """
    if not text.isascii():
        return pattern.search(text) is not None
    lower = text.lower()
    for branch in branches:
        for found in branch.finditer(lower):
            i = found.start()
            if i == 0 or not (lower[i - 1].isalnum() or lower[i - 1] == "_"):
                return True
    return False


#: The ratelimit pattern's one branch that holds a digit, without its leading word boundary: in a
#: message whose shape might match the family, a match holds a digit (see numeric_families), so it is
#: this branch's. The whole pattern, led by a word boundary, is tried at every character: 0.6 ms on
#: a stack trace of 9,000 characters (nezha's), where this literal search takes microseconds.
_429 = (re.compile(r"429\b"),)

_SEARCH = {
    "5xx": lambda family, message: _by_literals(_5XX, FAMILIES[family], message),
    "ratelimit": lambda family, message: _by_literals(_429, FAMILIES[family], message),
}


def resolve(found: list[str]) -> list[str]:
    if "exception" in found and _SPECIFIC.intersection(found):
        found = [f for f in found if f != "exception"]
    return found
