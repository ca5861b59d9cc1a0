"""Redaction: secrets are masked before anything is sent to a model.

A redactor is a plain function ``str -> (str, count)``; :func:`redactors` lists them in the order
they run (private keys before the key-value rule that would only catch their first line, JWTs
before bearer tokens). :func:`redact_messages` runs them over every string of a request — message
contents and tool-call arguments — so the client has one choke point before the wire.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from opsagent.models import PromptMessage, PromptToolCall

Redactor = Callable[[str], tuple[str, int]]


def pattern(regex: str, replacement: str, flags: int = 0) -> Redactor:
    compiled = re.compile(regex, flags)

    def redact(text: str) -> tuple[str, int]:
        return compiled.subn(replacement, text)

    redact.__name__ = f"redact_{replacement.strip('[]').split(':')[-1].replace('-', '_')}"
    return redact


_SECRETISH_VALUE = r"(?=[^\s\"',;&]*[0-9])(?=[^\s\"',;&]*[A-Za-z])[^\s\"',;&<>]{6,}"
_SECRET_NAME = (
    r"[A-Za-z0-9_.-]*(?:api[_-]?key|apikey|secret|passw(?:or)?d|pwd|access[_-]?key|private[_-]?key"
    r"|auth[_-]?token|access[_-]?token|refresh[_-]?token|session[_-]?token|client[_-]?secret|(?<![A-Za-z])token)"
)

private_keys = pattern(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    "[REDACTED:private-key]",
    re.S,
)
jwts = pattern(r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*", "[REDACTED:jwt]")
bearer_tokens = pattern(r"(?i)\b(bearer)(\s+)(?!\[REDACTED)[A-Za-z0-9._~+/=-]{16,}", r"\1\2[REDACTED:token]")
authorization_headers = pattern(
    r"(?i)\b(authorization\"?\s*[:=]\s*\"?(?:basic|bearer|token|digest)?\s*)(?!\[REDACTED)[^\s\"',;]{8,}",
    r"\1[REDACTED:token]",
)
url_passwords = pattern(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]+):[^@\s/]+@", r"\1:[REDACTED:password]@")
aws_access_keys = pattern(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b", "[REDACTED:cloud-key]")
aws_secret_keys = pattern(
    r"(?i)(aws_?secret_?access_?key|secret_?access_?key)([\"'\s:=]+)[A-Za-z0-9/+=]{40}", r"\1\2[REDACTED:cloud-key]"
)
gcp_api_keys = pattern(r"\bAIza[0-9A-Za-z_-]{35}\b", "[REDACTED:cloud-key]")
azure_keys = pattern(
    r"(?i)\b(AccountKey|SharedAccessKey|SharedAccessSignature)=[A-Za-z0-9+/=%]{16,}", r"\1=[REDACTED:cloud-key]"
)
vendor_keys = pattern(
    r"\b(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}|ya29\.[A-Za-z0-9_-]{20,}"
    r"|glpat-[A-Za-z0-9_-]{20,})",
    "[REDACTED:api-key]",
)
named_secrets = pattern(
    rf"(?i)\b({_SECRET_NAME})(\"?\s*[:=]\s*\"?|\s+is\s+)(?!\[REDACTED){_SECRETISH_VALUE}",
    r"\1\2[REDACTED:secret]",
)
emails = pattern(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b", "[REDACTED:email]")
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
    named_secrets,
)


def redactors(*, emails_too: bool = False, ips_too: bool = False) -> list[Redactor]:
    out = list(ALWAYS)
    if emails_too:
        out.append(emails)
    if ips_too:
        out.extend((ipv4, ipv6))
    return out


def redact(text: str, chain: Sequence[Redactor]) -> tuple[str, int]:
    total = 0
    for step in chain:
        text, n = step(text)
        total += n
    return text, total


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
