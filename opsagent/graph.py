"""The call graph of an incident: who calls whom, as caller -> callee edges between services."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from opsagent.fixtures import Edge


def descendants(graph: Iterable[Edge], roots: tuple[str, ...]) -> set[str]:
    """Every component reachable from the roots (the roots included)."""
    return reached(callees_of(graph), roots)


def reached(below: Mapping[str, set[str]], roots: tuple[str, ...]) -> set[str]:
    """Every component reachable from the roots through ``below`` (:func:`callees_of` of a graph), the
    roots included: for asking of many roots in turn, the callees gathered once."""
    seen = set(roots)
    frontier = sorted(roots)
    while frontier:
        node = frontier.pop()
        for callee in sorted(below.get(node, ())):
            if callee not in seen:
                seen.add(callee)
                frontier.append(callee)
    return seen


def callees_of(graph: Iterable[Edge]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for e in graph:
        out[e.caller].add(e.callee)
    return out


def callers_of(graph: Iterable[Edge]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for e in graph:
        out[e.callee].add(e.caller)
    return out


def depths(graph: Iterable[Edge], roots: tuple[str, ...]) -> dict[str, int]:
    """Calls from the roots to each component they reach (breadth first: the shortest path)."""
    below = callees_of(graph)
    out = {r: 0 for r in roots}
    frontier = sorted(roots)
    while frontier:
        nxt = []
        for node in frontier:
            for callee in sorted(below.get(node, ())):
                if callee not in out:
                    out[callee] = out[node] + 1
                    nxt.append(callee)
        frontier = nxt
    return out
