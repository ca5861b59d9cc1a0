"""Redaction: secrets masked wherever text leaves a source or this process.

A redactor is a plain function ``str -> (str, count)``; :func:`redactors` lists them in the order
they run: the exact values of the secrets this process was given (``OPSAGENT_*_TOKEN``,
``_PASSWORD``, ``_KEY``, the notification URL), then the shapes of secrets whoever's they are
(private keys before the key-value rule that would only catch their first line, JWTs before bearer
tokens). It is the project's one chain, and it runs at each door text goes through:

- error texts from clients and upstreams, when a :class:`~opsagent.errors.SourceError` is made
  (an upstream that echoes our ``Authorization`` header leaks nothing to whoever prints it);
- every observation, in the toolbox, before a reasoner, a report, the store or a model sees it;
- the report, as an investigation ends; what the store writes; every log event; every request to
  a model (:func:`redact_messages`, the LLM client's choke point); recordings.

:func:`scrub` and :func:`scrub_model` are those doors' entry points: the default chain, over a
string or every string of a pydantic model (a model with nothing to mask comes back as it was).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any, TypeVar

from pydantic import BaseModel

from opsagent.models import Observation, PromptMessage, PromptToolCall
from opsagent.wordtree import longest_first

Redactor = Callable[[str], tuple[str, int]]
M = TypeVar("M")

#: What the toolbox redacts as it makes an observation (:meth:`opsagent.tools.Toolbox._record`): its
#: data and its text. The report's door skips them (``scrub_model(report, done=...)``): a report of a
#: large system holds hundreds of observations, and walking them again cost a fifth of its time.
OBSERVATIONS_DONE: Mapping[type[BaseModel], frozenset[str]] = {Observation: frozenset({"data", "text"})}

#: Shorter values are not masked by value (a four-letter password would mask every word it spells);
#: their shapes (``password=…``, ``Bearer …``) still are.
MIN_SECRET_LENGTH = 8
#: Environment variables holding secrets that do not end like one.
_SECRET_VARIABLES = frozenset({"OPSAGENT_NOTIFY_URL"})


def pattern(regex: str, replacement: str, flags: int = 0, *, hints: Sequence[str] = ()) -> Redactor:
    """A redactor from a regex. ``hints``: words (any case) one of which every match contains; text
    without any of them is not searched (a substring test costs far less than the regex)."""
    compiled = re.compile(regex, flags)
    words = tuple(h.lower() for h in hints)

    def redact(text: str) -> tuple[str, int]:
        if words:
            lower = text.lower()
            if not any(w in lower for w in words):
                return text, 0
        return compiled.subn(replacement, text)

    redact.__name__ = f"redact_{replacement.strip('[]').split(':')[-1].replace('-', '_')}"
    if words:
        setattr(redact, HINTS, words)
    return redact


#: The attribute naming the words (lower case) one of which a redactor's every match contains:
#: a redactor without it may match any text. See :func:`redact`.
HINTS = "hints"


_SECRETISH_VALUE = r"(?=[^\s\"',;&]*[0-9])(?=[^\s\"',;&]*[A-Za-z])[^\s\"',;&<>]{6,}"
#: After ``=`` or ``:`` a value needs no digit (``password=hunterLettersOnly``): only a few words
#: that say there is no value are left, so ``password: required`` still reads as it was written.
_ASSIGNED_VALUE = r"(?!(?:none|null|nil|true|false|empty|missing|required|invalid|expired|redacted)\b)[^\s\"',;&<>]{6,}"
#: The word that ends a name holding a secret, and what must come before it in that name
#: (``db_password``, ``X-Api-Key``, ``access_token``; a bare ``token`` not inside a word).
#: ``is`` in prose still wants a value that looks like a secret (``the token is expired`` stays).
_SECRET_WORD = re.compile(
    r"(key|secret|passw(?:or)?d|pwd|token)(?:(\"?\s*[:=]\s*\"?)(?!\[redacted)(?:"
    + _ASSIGNED_VALUE
    + r")|(\s+is\s+)(?!\[redacted)"
    + _SECRETISH_VALUE
    + ")"
)
_BEFORE_KEY = re.compile(r"(?:api|access|private)[_-]?$")
_BEFORE_TOKEN = re.compile(r"(?:(?:auth|access|refresh|session)[_-]?|[^a-z]|^)$")


def _names_a_secret(lower: str, match: re.Match[str]) -> bool:
    word, before = match.group(1), lower[max(0, match.start() - 8) : match.start()]
    if word == "key":
        return _BEFORE_KEY.search(before) is not None
    if word == "token":
        return _BEFORE_TOKEN.search(before) is not None
    return True


def named_secrets(text: str) -> tuple[str, int]:
    """``password=…``, ``"api_key": "…"``, ``X-Api-Key: …``, ``token is …``: the value masked when
    it is six characters or more (after ``is``, only when it also mixes letters and digits), so
    ``token_budget: 40000`` and ``the token is expired`` stay.

    Written as a function rather than one case-insensitive regex: that regex costs ~100 µs on a
    webhook notification; this finds the word in the lower-cased text and checks what precedes it."""
    lower = text.lower()
    if len(lower) != len(text):  # a character whose lower case is longer: positions would not line up
        lower = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
    out: list[str] = []
    last = found = 0
    for match in _SECRET_WORD.finditer(lower):
        if _names_a_secret(lower, match):
            separator = 2 if match.group(2) is not None else 3
            out += (text[last : match.end(separator)], "[REDACTED:secret]")
            last = match.end()
            found += 1
    if not found:
        return text, 0
    out.append(text[last:])
    return "".join(out), found


# every match of _SECRET_WORD begins with one of these, found in the lower-cased text
setattr(named_secrets, HINTS, ("key", "secret", "passw", "pwd", "token"))


private_keys = pattern(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    "[REDACTED:private-key]",
    re.S,
    hints=("-----BEGIN",),
)
jwts = pattern(r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*", "[REDACTED:jwt]", hints=("eyJ",))
bearer_tokens = pattern(
    r"(?i)\b(bearer)(\s+)(?!\[REDACTED)[A-Za-z0-9._~+/=-]{16,}", r"\1\2[REDACTED:token]", hints=("bearer",)
)
authorization_headers = pattern(
    r"(?i)\b(authorization\"?\s*[:=]\s*\"?(?:basic|bearer|token|digest)?\s*)(?!\[REDACTED)[^\s\"',;]{8,}",
    r"\1[REDACTED:token]",
    hints=("authorization",),
)
cookie_headers = pattern(
    r"(?i)\b((?:set-)?cookie\"?\s*:\s*\"?)(?!\[REDACTED)[^\r\n\"]+",
    r"\1[REDACTED:cookie]",
    hints=("cookie",),
)
url_passwords = pattern(r"://([^/\s:@]+):[^@\s/]+@", r"://\1:[REDACTED:password]@", hints=("://",))
aws_access_keys = pattern(
    r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b",
    "[REDACTED:cloud-key]",
    hints=("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA"),
)
aws_secret_keys = pattern(
    r"(?i)(aws_?secret_?access_?key|secret_?access_?key)([\"'\s:=]+)[A-Za-z0-9/+=]{40}",
    r"\1\2[REDACTED:cloud-key]",
    hints=("secret",),
)
gcp_api_keys = pattern(r"\bAIza[0-9A-Za-z_-]{35}\b", "[REDACTED:cloud-key]", hints=("AIza",))
azure_keys = pattern(
    r"(?i)\b(AccountKey|SharedAccessKey|SharedAccessSignature)=[A-Za-z0-9+/=%]{16,}",
    r"\1=[REDACTED:cloud-key]",
    hints=("AccountKey", "SharedAccess"),
)
vendor_keys = pattern(
    r"\b(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}|ya29\.[A-Za-z0-9_-]{20,}"
    r"|glpat-[A-Za-z0-9_-]{20,})",
    "[REDACTED:api-key]",
    hints=("sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox", "sk_", "rk_", "ya29.", "glpat-"),
)
emails = pattern(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b", "[REDACTED:email]", hints=("@",))
ipv4 = pattern(
    r"(?<![\d.])(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?:\.(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}(?![\d.])",
    "[REDACTED:ip]",
)
ipv6 = pattern(r"(?i)(?<![\w:])(?:[0-9a-f]{1,4}:){7}[0-9a-f]{1,4}(?![\w:])", "[REDACTED:ip]")

ALWAYS: tuple[Redactor, ...] = (
    private_keys,
    jwts,
    url_passwords,
    aws_access_keys,
    aws_secret_keys,
    gcp_api_keys,
    azure_keys,
    vendor_keys,
    bearer_tokens,
    authorization_headers,
    cookie_headers,
    named_secrets,
)


def environment_secrets(environ: Mapping[str, str]) -> list[str]:
    """The values of the ``OPSAGENT_*`` variables that hold secrets (tokens, passwords, keys)."""
    return [
        value
        for name, value in environ.items()
        if name.startswith("OPSAGENT_")
        and (name.endswith(("_TOKEN", "_PASSWORD", "_KEY", "_SECRET")) or name in _SECRET_VARIABLES)
    ]


def known_secrets(values: Sequence[str]) -> Redactor:
    """Exact secrets wherever they appear, longest first (one may contain another)."""
    secrets = sorted({v for v in values if len(v) >= MIN_SECRET_LENGTH}, key=len, reverse=True)

    def redact_configured(text: str) -> tuple[str, int]:
        total = 0
        for secret in secrets:
            n = text.count(secret)
            if n:
                text = text.replace(secret, "[REDACTED:secret]")
                total += n
        return text, total

    if all(s.isascii() for s in secrets):  # an ASCII secret in a text is in its lower case too
        setattr(redact_configured, HINTS, tuple(s.lower() for s in secrets))
    return redact_configured


def redactors(
    *, emails_too: bool = False, ips_too: bool = False, environ: Mapping[str, str] | None = None
) -> list[Redactor]:
    """The chain: this process's secrets (from ``environ``, the environment by default), then the shapes."""
    out = [known_secrets(environment_secrets(os.environ if environ is None else environ)), *ALWAYS]
    if emails_too:
        out.append(emails)
    if ips_too:
        out.extend((ipv4, ipv6))
    return out


def redact(text: str, chain: Sequence[Redactor]) -> tuple[str, int]:
    """``text`` through every redactor of ``chain``, and how many secrets they masked.

    Most text holds no secret, and most redactors name the words one of which their every match
    contains: where each redactor of the chain does and the text holds none of those words, no
    redactor runs (one search for all their words instead of one pass a redactor; a log summary
    redacts every distinct line)."""
    gate = _gate(tuple(chain))
    if gate is not None and gate.search(text.lower()) is None:
        return text, 0
    total = 0
    for step in chain:
        text, n = step(text)
        total += n
    return text, total


@lru_cache(maxsize=64)
def _gate(chain: tuple[Redactor, ...]) -> re.Pattern[str] | None:
    """One search for every word the chain's redactors name; None if one of them names none."""
    words = gate_words(chain)
    return None if words is None else _gate_of(words)


def gate_words(chain: Sequence[Redactor]) -> frozenset[str] | None:
    """The words (lower case) one of which every match of every redactor of ``chain`` contains, or
    None if a redactor names none: lower-cased text holding none of them passes :func:`redact`
    unchanged."""
    words: set[str] = set()
    for step in chain:
        hints = getattr(step, HINTS, None)
        if hints is None:
            return None
        words.update(hints)
    return frozenset(words)


@lru_cache(maxsize=64)
def _gate_of(words: frozenset[str]) -> re.Pattern[str]:
    """The search for any of ``words``, written once per set of words: every door builds its chain
    anew (:func:`redactors`), so the cache by chain above misses at each door (and writing the tree
    of a few dozen words again each time cost more than the search it gates)."""
    # a tree of the words' beginnings: two to three times quicker than a flat list on long lines
    return re.compile("(?:)" if "" in words else longest_first(words))


def redact_messages(messages: Sequence[PromptMessage], chain: Sequence[Redactor]) -> tuple[list[PromptMessage], int]:
    """Every string a request carries, redacted; and how many secrets were masked."""
    total = 0
    out = []
    for m in messages:
        content = m.content
        if content is not None:
            content, n = redact(content, chain)
            total += n
        calls = []
        for c in m.tool_calls:
            arguments, n = redact(c.arguments, chain)
            total += n
            calls.append(PromptToolCall(id=c.id, name=c.name, arguments=arguments))
        out.append(m.model_copy(update={"content": content, "tool_calls": calls}))
    return out, total


#: Names (of headers, query parameters) whose values are credentials.
CREDENTIAL_NAME = re.compile(r"(?i)^(?:proxy-)?authorization$|^cookie$|key|secret|token|passw|pwd|signature|credential")


def redact_query(target: str) -> str:
    """A URL or request target (``/path?a=b``) with the values of credential-named query parameters
    masked, whatever they look like, and the rest through the chain."""
    path, mark, query = target.partition("?")
    if mark:
        pairs = []
        for pair in query.split("&"):
            name, eq, _ = pair.partition("=")
            pairs.append(f"{name}=[REDACTED:secret]" if eq and CREDENTIAL_NAME.search(name) else pair)
        target = f"{path}?{'&'.join(pairs)}"
    return scrub(target)


# ---------------------------------------------------------------- the doors


def scrub(text: str) -> str:
    """``text`` with every secret the default chain knows masked."""
    return redact(text, redactors())[0]


_NOTHING_DONE: Mapping[type[BaseModel], frozenset[str]] = {}


#: Values that hold no text, told by their exact type: most of an observation's values are numbers,
#: and asking each of them whether it is a model (an ABC-style check) cost a third of the walk.
_NO_TEXT: frozenset[type] = frozenset({float, int, bool, type(None)})


def _strings(value: Any, out: list[str], done: Mapping[type[BaseModel], frozenset[str]]) -> None:
    kind = type(value)
    if kind in _NO_TEXT:
        return
    if kind is str or isinstance(value, str):
        out.append(value)
    elif isinstance(value, BaseModel):
        skip = done.get(kind, frozenset())
        for name in kind.model_fields:
            if name not in skip:
                _strings(getattr(value, name), out, done)
        for extra in (value.__pydantic_extra__ or {}).values():
            _strings(extra, out, done)
    elif isinstance(value, dict):
        for k, v in value.items():
            _strings(k, out, done)
            _strings(v, out, done)
            if isinstance(k, str) and isinstance(v, str) and v:  # {"password": "…"}: the key decides
                out.append(f"{k}={_ANY_VALUE}")
    elif isinstance(value, list | tuple | set | frozenset):
        for v in value:
            _strings(v, out, done)


def _rebuilt(value: Any, chain: Sequence[Redactor], done: Mapping[type[BaseModel], frozenset[str]]) -> Any:
    """``value`` with its strings redacted; parts with nothing to mask are the same objects."""
    if isinstance(value, str):
        text, n = redact(value, chain)
        return text if n else value
    if isinstance(value, BaseModel):
        changed = {}
        skip = done.get(type(value), frozenset())
        for name in type(value).model_fields:
            if name in skip:
                continue
            old = getattr(value, name)
            new = _rebuilt(old, chain, done)
            if new is not old:
                changed[name] = new
        extra = value.__pydantic_extra__
        if extra:
            for name, old in extra.items():
                new = _rebuilt(old, chain, done)
                if new is not old:
                    changed[name] = new
        return value.model_copy(update=changed) if changed else value
    if isinstance(value, dict):
        items = [(_rebuilt(k, chain, done), _keyed(k, v, chain, done)) for k, v in value.items()]
        if all(nk is k and nv is v for (nk, nv), (k, v) in zip(items, value.items(), strict=True)):
            return value
        return type(value)(items)
    if isinstance(value, list | tuple | set | frozenset):
        parts = [_rebuilt(v, chain, done) for v in value]
        if all(new is old for new, old in zip(parts, value, strict=True)):
            return value
        return type(value)(parts)
    return value


#: What stands for a dict's value when asking whether its key names a secret (the key decides, not
#: the value: ``{"description": "login failed password=…"}`` keeps its words and loses the password).
_ANY_VALUE = "anyvalue"


def _keyed(key: Any, value: Any, chain: Sequence[Redactor], done: Mapping[type[BaseModel], frozenset[str]]) -> Any:
    """A dict's value, masked whole when its key names a secret (``{"password": "…"}``)."""
    if isinstance(key, str) and isinstance(value, str) and value and named_secrets(f"{key}={_ANY_VALUE}")[1]:
        return "[REDACTED:secret]"
    return _rebuilt(value, chain, done)


def scrub_model(
    value: M, chain: Sequence[Redactor] | None = None, *, done: Mapping[type[BaseModel], frozenset[str]] = _NOTHING_DONE
) -> M:
    """Every string of a model (or of dicts, lists and tuples of them) redacted, but for the fields
    ``done`` names per model class (redacted at an earlier door: :data:`OBSERVATIONS_DONE`).

    Most models hold nothing to mask: their strings are joined (one per line) and the chain runs
    once over the whole; only when it finds something is the model rebuilt, string by string. A
    secret in one string shows in the joined text too (a newline is a boundary to every rule)."""
    chain = redactors() if chain is None else chain
    strings: list[str] = []
    _strings(value, strings, done)
    if not strings or not redact("\n".join(strings), chain)[1]:
        return value
    rebuilt: M = _rebuilt(value, chain, done)
    return rebuilt


def scrub_json(text: str, chain: Sequence[Redactor] | None = None) -> str:
    """A JSON document with the strings inside it redacted; the very text received when there is
    nothing to mask. (Masking the raw text could reach across a quote and break the document, and
    miss a secret behind an escape such as ``\\n``.)"""
    chain = redactors() if chain is None else chain
    try:
        document = json.loads(text)
    except ValueError:
        return redact(text, chain)[0]
    rebuilt = scrub_model(document, chain)
    return text if rebuilt is document else json.dumps(rebuilt, ensure_ascii=False, separators=(",", ":"))
