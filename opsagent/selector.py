"""The PromQL subset the replay source evaluates: one instant-vector selector.

``name{label="v", other=~"re", x!="y"}`` and ``vector(N)`` (a constant, used for fixed limits such as
a CPU ratio of 1). Anything else is rejected with a hint; a live Prometheus evaluates full PromQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SELECTOR = re.compile(r"^\s*([A-Za-z_:][A-Za-z0-9_:]*)?\s*(\{(.*)\})?\s*$", re.S)
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_VECTOR = re.compile(r"^\s*vector\(\s*([-+0-9.eE]+)\s*\)\s*$")


class SelectorError(ValueError):
    pass


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str

    def matches(self, actual: str | None) -> bool:
        got = actual or ""
        if self.op == "=":
            return got == self.value
        if self.op == "!=":
            return got != self.value
        hit = re.fullmatch(self.value, got) is not None
        return hit if self.op == "=~" else not hit


@dataclass(frozen=True)
class Selector:
    name: str | None
    matchers: tuple[Matcher, ...]
    constant: float | None = None


def parse(query: str) -> Selector:
    const = _VECTOR.match(query)
    if const:
        return Selector(name=None, matchers=(), constant=float(const.group(1)))
    m = _SELECTOR.match(query)
    if not m or (m.group(1) is None and m.group(2) is None):
        raise SelectorError(f'cannot evaluate {query!r} in replay: use a selector such as metric{{service="x"}}')
    body = m.group(3) or ""
    matchers: list[Matcher] = []
    pos = 0
    while pos < len(body.strip()):
        mm = _MATCHER.match(body, pos)
        if not mm:
            raise SelectorError(f"bad label matcher in {query!r} near {body[pos:]!r}")
        matchers.append(Matcher(mm.group(1), mm.group(2), mm.group(3).replace('\\"', '"')))
        pos = mm.end()
    return Selector(name=m.group(1), matchers=tuple(matchers))
