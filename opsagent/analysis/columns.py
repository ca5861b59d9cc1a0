"""Spans as columns: the one read of a recording's spans that every trace analysis shares.

Walking a few hundred thousand span objects costs more than any arithmetic done on them, so the
spans are read once, each field into an array and each text coded as a number, and the analyses
(:mod:`opsagent.analysis.spans`, :mod:`opsagent.analysis.gaps`, :mod:`opsagent.analysis.steps`)
read the arrays. It must stay a leaf: the analyses import it, and it imports none of them.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from opsagent.fixtures import Span


@dataclass(frozen=True, slots=True)
class SpanColumns:
    """Spans as columns: one array a field, the i-th entry of each about span i, each text coded as a
    number. Read once (:meth:`read`), then every analysis of the spans reads the arrays: walking a
    few hundred thousand span objects costs more than any arithmetic done on them, so a recording's
    spans are walked once, not once per analysis."""

    services: tuple[str, ...]  # the distinct service names; ``service[i]`` indexes them
    operations: tuple[str, ...]
    service: np.ndarray  # int64 codes into ``services``
    operation: np.ndarray  # int64 codes into ``operations``
    start: np.ndarray  # unix seconds, each equal to its span's ``start_s``
    duration_us: np.ndarray  # float64
    error: np.ndarray  # bool: status "error"
    # each (trace, span id) a span has or names as its parent, coded: a trace that repeats a span id
    # gives every span of that id the same children, as a lookup by id does
    own: np.ndarray  # int64 code of the span's (trace, span id)
    parent: np.ndarray  # int64 code of its (trace, parent id); -1 without a parent
    keys: int  # how many (trace, span id) codes there are
    # the span id alone, coded (a log line names its span by id alone)
    span_ids: tuple[str, ...]  # the distinct span ids, parents' included; ``span_id[i]`` indexes them
    span_id: np.ndarray  # int64
    parent_id: np.ndarray  # int64; -1 without a parent

    def __len__(self) -> int:
        return len(self.start)

    @classmethod
    def read(cls, spans: Iterable[Span]) -> SpanColumns:
        """``spans`` read once: a stream of spans (a generator over a file) is never held whole, only a
        few numbers a span and the ids that link parents to children."""
        service_codes: dict[str, int] = {}
        operation_codes: dict[str, int] = {}
        codes: dict[tuple[str, str], int] = {}
        id_codes: dict[str, int] = {}
        service, operation, own, parent = array("q"), array("q"), array("q"), array("q")
        span_id, parent_id = array("q"), array("q")
        duration_us, failed = array("d"), array("b")
        # starts in unix ns, divided as one array at the end (an int divided by a float is the int made
        # a float, then divided, in Python as in numpy: the same to the last bit); once one is not
        # (RFC 3339, or beyond int64), every start is its start_s, as one span at a time
        ns: array[int] | None = array("q")
        seconds: array[float] = array("d")
        for s in spans:
            trace, pid = s.trace_id, s.parent_id
            service.append(service_codes.setdefault(s.service, len(service_codes)))
            operation.append(operation_codes.setdefault(s.operation, len(operation_codes)))
            own.append(codes.setdefault((trace, s.span_id), len(codes)))
            span_id.append(id_codes.setdefault(s.span_id, len(id_codes)))
            if pid:
                parent.append(codes.setdefault((trace, pid), len(codes)))
                parent_id.append(id_codes.setdefault(pid, len(id_codes)))
            else:
                parent.append(-1)
                parent_id.append(-1)
            duration_us.append(s.duration_us)
            failed.append(s.status == "error")
            if ns is not None and type(s.start) is int:
                try:
                    ns.append(s.start)
                    continue
                except OverflowError:
                    pass
            if ns is not None:
                seconds = array("d", [v / 1e9 for v in ns])
                ns = None
            seconds.append(s.start_s)
        return cls(
            services=tuple(service_codes),
            operations=tuple(operation_codes),
            service=_column(service, np.int64),
            operation=_column(operation, np.int64),
            start=_column(ns, np.int64) / 1e9 if ns is not None else _column(seconds, np.float64),
            duration_us=_column(duration_us, np.float64),
            error=_column(failed, np.int8).astype(bool),
            own=_column(own, np.int64),
            parent=_column(parent, np.int64),
            keys=len(codes),
            span_ids=tuple(id_codes),
            span_id=_column(span_id, np.int64),
            parent_id=_column(parent_id, np.int64),
        )

    def last_of(self, codes: np.ndarray, size: int) -> np.ndarray:
        """For each of ``size`` codes, the index of the last span whose ``codes`` entry it is (-1 where
        none is): a span id given twice is its last span's, as a dict filled in span order keeps."""
        found = np.full(size, -1, dtype=np.int64)
        if len(codes):
            distinct, first_from_end = np.unique(codes[::-1], return_index=True)
            found[distinct] = len(codes) - 1 - first_from_end
        return found


def _column(values: array[int] | array[float], dtype: type[np.generic]) -> np.ndarray:
    return np.frombuffer(values, dtype=dtype) if len(values) else np.zeros(0, dtype=dtype)
