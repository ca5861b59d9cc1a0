"""Loghub 2k for the log benchmarks: the labelled systems, and many more lines synthesised from them.

The data is read where it lies (``../shared/datasets/loghub`` from the repository root, or a path
given on the command line) and never copied. Labels are the corrected ones of Khan et al. (ICSE
2022) as shipped by logpai/logparser (``corrected/<Sys>/<Sys>_2k.log_structured_corrected.csv``);
the ``Content`` column is the message, ``EventId`` the true template.

Synthesis is deterministic (seeded): each line is a loghub line with its parameters varied (see
:func:`synthesise`), so the stream has loghub's templates and far more distinct messages than
loghub has lines.
"""

from __future__ import annotations

import csv
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

SYSTEMS = (
    "HDFS",
    "Hadoop",
    "Spark",
    "Zookeeper",
    "BGL",
    "HPC",
    "Thunderbird",
    "Windows",
    "Linux",
    "Android",
    "HealthApp",
    "Apache",
    "Proxifier",
    "OpenSSH",
    "OpenStack",
    "Mac",
)

DEFAULT_PATH = Path(__file__).resolve().parent.parent.parent / "shared" / "datasets" / "loghub"
WHERE = "loghub 2k: github.com/logpai/loghub; corrected labels: github.com/logpai/logparser (data/loghub_2k_corrected)"


@dataclass(frozen=True, slots=True)
class Labelled:
    system: str
    message: str
    event: str
    template: str
    level: str


@dataclass(frozen=True, slots=True)
class Record:
    ts: datetime
    service: str
    level: str
    message: str


def labelled(root: Path, system: str) -> list[Labelled]:
    path = root / "corrected" / system / f"{system}_2k.log_structured_corrected.csv"
    if not path.exists():
        raise SystemExit(f"{path} not found: pass --loghub DIR ({WHERE})")
    with path.open(newline="", encoding="utf-8") as f:
        return [
            Labelled(system, row["Content"], row["EventId"], row["EventTemplate"], row.get("Level") or "INFO")
            for row in csv.DictReader(f)
        ]


def all_labelled(root: Path) -> list[Labelled]:
    return [line for system in SYSTEMS for line in labelled(root, system)]


_NUMBERS = re.compile(r"(\d+)")


def _binds(neighbour: str) -> bool:
    """A character that makes a number part of a structure: 10.0.0.1, 12:30, blk_7, v2."""
    return neighbour != "" and (neighbour.isalnum() or neighbour in ".:_-/")


def _template_pattern(template: str) -> re.Pattern[str] | None:
    parts = template.split("<*>")
    try:
        return re.compile("^" + "(.*?)".join(re.escape(p) for p in parts) + "$", re.S)
    except re.error:
        return None


def synthesise(seeds: list[Labelled], n: int, *, start: datetime, end: datetime, seed: int = 7) -> Iterator[Record]:
    """``n`` records, timestamps spread evenly from ``start`` to ``end``, messages from the seeds.

    A record's message is a seed's with its parameters (the ``<*>`` of its labelled template) varied:
    each takes the value some other line of the same event had there, with its numbers redrawn (a
    free-standing short number may gain or lose a digit; numbers inside an address or 0x… keep their
    length, and a leading 0 stays). Text outside the parameters is the seed's, unchanged.
    """
    rng = random.Random(seed)
    order = list(range(len(seeds)))
    rng.shuffle(order)
    step = (end - start) / max(n, 1)
    # per event, the values each parameter position held in the labelled data, split at their numbers
    observed: dict[tuple[str, str], list[list[_Value]]] = {}
    parsed: list[tuple[list[str], tuple[str, str]] | None] = []
    for s in seeds:
        pattern = _template_pattern(s.template)
        m = pattern.match(s.message) if pattern else None
        key = (s.system, s.event)
        if m is None or not m.groups() or len(observed.setdefault(key, [[] for _ in m.groups()])) != len(m.groups()):
            parsed.append(None)
            continue
        for column, value in zip(observed[key], m.groups(), strict=True):
            column.append(_Value.of(value))
        parsed.append((s.template.split("<*>"), key))
    draw = rng.random
    for i in range(n):
        k = order[i % len(order)]
        s, p = seeds[k], parsed[k]
        message = s.message
        if p is not None:
            literal, key = p
            values = [column[int(draw() * len(column))].redrawn(draw) for column in observed[key]]
            message = "".join(part + (values[j] if j < len(values) else "") for j, part in enumerate(literal))
        yield Record(ts=start + step * i, service=s.system, level=s.level, message=message)


@dataclass(frozen=True, slots=True)
class _Value:
    """A parameter value split at its numbers: text, number, text, number, …, text."""

    pieces: tuple[str, ...]
    free: tuple[bool, ...]  # per number: free-standing (its length may change)

    @classmethod
    def of(cls, value: str) -> _Value:
        pieces = tuple(_NUMBERS.split(value))
        free = tuple(not _binds(pieces[i - 1][-1:]) and not _binds(pieces[i + 1][:1]) for i in range(1, len(pieces), 2))
        return cls(pieces, free)

    def redrawn(self, draw: Callable[[], float]) -> str:
        if len(self.pieces) == 1:
            return self.pieces[0]
        out = [self.pieces[0]]
        for j in range(1, len(self.pieces), 2):
            text = self.pieces[j]
            size = len(text)
            if self.free[j // 2] and size < 6:
                size = max(1, size + (-1 if draw() < 0.25 else 1 if draw() < 0.33 else 0))
            if text[0] == "0":
                out.append("0" + (f"{int(draw() * 10 ** (size - 1)):0{size - 1}d}" if size > 1 else ""))
            else:
                low = 10 ** (size - 1) if size > 1 else 1
                out.append(str(low + int(draw() * (10**size - low))))
            out.append(self.pieces[j + 1])
        return "".join(out)
