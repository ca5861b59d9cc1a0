"""Spans as columns: the one read of a recording's spans that every trace analysis shares.

Walking a few hundred thousand span objects costs more than any arithmetic done on them, so the
spans are read once, each field into an array and each text coded as a number, and the analyses
(:mod:`opsagent.analysis.spans`, :mod:`opsagent.analysis.gaps`, :mod:`opsagent.analysis.steps`)
read the arrays. A recording's spans go from JSON straight into these columns
(:func:`opsagent.fixtures.load`), never one object a span. It must stay a leaf: the analyses and
the loader import it, and it imports none of them.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from itertools import filterfalse, islice, repeat
from typing import TYPE_CHECKING, Any, TypeVar, overload

import numpy as np

if TYPE_CHECKING:  # the loader imports this module: only the type, not the module, at run time
    from opsagent.fixtures import Span

#: How many spans are coded at a time: large enough that each batch's work runs in C, small enough
#: that a batch's Python objects (its spans, or its parsed lines) stay a few MiB.
BATCH = 4096


@dataclass(frozen=True, slots=True)
class SpanColumns:
    """Spans as columns: one array a field, the i-th entry of each about span i, each text coded as a
    number. Read once (:meth:`read`, or straight from a file by the loader), then every analysis of
    the spans reads the arrays: walking a few hundred thousand span objects costs more than any
    arithmetic done on them, so a recording's spans are walked once, not once per analysis."""

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
    span_ids: SpanIds  # the distinct span ids, parents' included; ``span_id[i]`` indexes them
    span_id: np.ndarray  # int64
    parent_id: np.ndarray  # int64; -1 without a parent

    def __len__(self) -> int:
        return len(self.start)

    @classmethod
    def read(cls, spans: Iterable[Span]) -> SpanColumns:
        """``spans`` read once: a stream of spans (a generator over a file) is never held whole, only a
        few numbers a span and the ids that link parents to children."""
        batches = SpanBatches()
        it = iter(spans)
        while batch := list(islice(it, BATCH)):
            batches.add(
                trace_id=[s.trace_id for s in batch],
                span_id=[s.span_id for s in batch],
                parent_id=[s.parent_id for s in batch],
                service=[s.service for s in batch],
                operation=[s.operation for s in batch],
                start=[s.start if type(s.start) is int else s.start_s for s in batch],
                duration_us=[s.duration_us for s in batch],
                error=[s.status == "error" for s in batch],
            )
        return batches.columns()

    def as_json(self) -> dict[str, Any]:
        """Each column as JSON values (a recording's dump shows its spans as read)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["span_ids"] = list(self.span_ids)
        return {name: v.tolist() if isinstance(v, np.ndarray) else v for name, v in out.items()}

    def last_of(self, codes: np.ndarray, size: int) -> np.ndarray:
        """For each of ``size`` codes, the index of the last span whose ``codes`` entry it is (-1 where
        none is): a span id given twice is its last span's, as a dict filled in span order keeps."""
        found = np.full(size, -1, dtype=np.int64)
        if len(codes):
            distinct, first_from_end = np.unique(codes[::-1], return_index=True)
            found[distinct] = len(codes) - 1 - first_from_end
        return found


class SpanBatches:
    """Spans added a batch of fields at a time, coded as they come; :meth:`columns` ends the read.

    Each text is coded in the order it first appears (a span's own id before its parent's), so the
    columns are the same whichever way the spans were read. Each batch's work runs in C (``dict``,
    ``map``, ``array``): no Python statement runs once a span, only once a new text."""

    def __init__(self) -> None:
        self._services: dict[str, int] = {}
        self._operations: dict[str, int] = {}
        self._traces: dict[str, int] = {}
        # Span ids, coded at the end over the whole as bytes (numpy), a few bytes an id: a large system
        # has hundreds of thousands, and a table of them as Python texts kept about 60 MiB resident a
        # million spans. Each batch's own ids, its parent ids ("" for none) and which spans have one;
        # None once an id is not ASCII, or holds a NUL (bytes arrays drop trailing NULs), then coded
        # as texts, one table (``_ids``) from there on.
        self._own: list[np.ndarray] | None = []
        self._parents: list[np.ndarray] = []
        self._has_parent = array("b")
        self._ids: dict[str, int] = {}  # span id -> code, once coded as texts
        self._service, self._operation, self._trace = array("q"), array("q"), array("q")
        self._span_id, self._parent_id = array("q"), array("q")
        self._duration_us, self._error = array("d"), array("b")
        # starts in unix ns, divided as one array at the end (an int divided by a float is the int made
        # a float, then divided, in Python as in numpy: the same to the last bit); once one is not
        # (RFC 3339, or beyond int64), every start is its start_s, as one span at a time
        self._ns: array[int] | None = array("q")
        self._seconds: array[float] = array("d")

    def add(
        self,
        *,
        trace_id: list[str],
        span_id: list[str],
        parent_id: list[str | None],
        service: list[str],
        operation: list[str],
        start: list[int | float],
        duration_us: list[float],
        error: list[bool],
    ) -> None:
        """One batch, each list a field of the same spans in order. ``start``: unix ns as an ``int``, or
        unix seconds as a ``float`` (a time read from RFC 3339); an empty parent id is no parent."""
        parents = [p or None for p in parent_id]
        if self._own is not None:
            own, named = _as_bytes(span_id), _as_bytes(list(filter(None, parents)))
            if own is not None and named is not None:
                self._own.append(own)
                self._parents.append(_as_bytes([p or "" for p in parents]))  # type: ignore[arg-type]
                self._has_parent.extend(array("b", map(bool, parents)))
                self._add_rest(trace_id, service, operation, start, duration_us, error)
                return
            self._as_texts()
        self._code_texts(span_id, parents)
        self._add_rest(trace_id, service, operation, start, duration_us, error)

    def _code_texts(self, own: list[str], parents: list[str | None]) -> None:
        """Span ids and their parents' (None for none) coded as texts, each span's own before its parent's."""
        ids: list[str | None] = [None] * (2 * len(own))
        ids[0::2] = own
        ids[1::2] = parents
        id_codes = coded(self._ids, ids)
        self._span_id.extend(id_codes[0::2])
        self._parent_id.extend(id_codes[1::2])

    def _add_rest(
        self,
        trace_id: list[str],
        service: list[str],
        operation: list[str],
        start: list[int | float],
        duration_us: list[float],
        error: list[bool],
    ) -> None:
        self._trace.extend(coded(self._traces, trace_id))
        self._service.extend(coded(self._services, service))
        self._operation.extend(coded(self._operations, operation))
        self._duration_us.extend(array("d", duration_us))
        self._error.extend(array("b", error))
        if self._ns is not None:
            try:
                self._ns.extend(array("q", start))  # type: ignore[arg-type]  # a float raises TypeError
                return
            except (TypeError, OverflowError):  # a time in seconds, or beyond int64
                self._seconds = array("d", [v / 1e9 for v in self._ns])
                self._ns = None
        self._seconds.extend(array("d", [v / 1e9 if type(v) is int else v for v in start]))

    def _as_texts(self) -> None:
        """From here on, span ids coded as texts: those read so far coded first, in the order read."""
        for own, parents, has in zip(self._own or (), self._parents, self._batches_of(self._has_parent), strict=True):
            named = [p if h else None for p, h in zip(parents.astype(str).tolist(), has, strict=True)]
            self._code_texts(own.astype(str).tolist(), named)
        self._own, self._parents = None, []

    def _batches_of(self, values: array[int]) -> Iterator[list[int]]:
        """``values`` (one a span) cut as the batches of ids read so far were."""
        at = 0
        for own in self._own or ():
            yield values[at : at + len(own)].tolist()
            at += len(own)

    def _span_id_codes(self) -> tuple[np.ndarray, np.ndarray, SpanIds]:
        """Each span's id and its parent's coded (-1 for none), in the order they first appear (own
        before parent), and the distinct ids."""
        if self._own is None:
            return as_column(self._span_id, np.int64), as_column(self._parent_id, np.int64), SpanIds(tuple(self._ids))
        n = sum(map(len, self._own))
        width = max((a.dtype.itemsize for a in (*self._own, *self._parents)), default=1)
        ids = np.empty(2 * n, dtype=f"S{width}")
        ids[0::2] = np.concatenate(self._own) if self._own else ids[:0]
        ids[1::2] = np.concatenate(self._parents) if self._parents else ids[:0]
        self._own, self._parents = [], []
        named = np.ones(2 * n, dtype=bool)
        named[1::2] = as_column(self._has_parent, np.int8).astype(bool)
        ids = ids[named]  # the array of every slot freed before the sort's own copies are made
        distinct, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        del ids
        order = np.argsort(first, kind="stable")
        rank = np.empty(len(distinct), dtype=np.int64)
        rank[order] = np.arange(len(distinct))
        codes = np.full(2 * n, -1, dtype=np.int64)
        codes[named] = rank[inverse.reshape(-1)]
        return _narrow(codes[0::2]), _narrow(codes[1::2]), SpanIds(distinct[order])

    def columns(self) -> SpanColumns:
        span_id, parent_id, span_ids = self._span_id_codes()
        own, parent, keys = self._pairs(span_id, parent_id, len(span_ids))
        return SpanColumns(
            services=tuple(self._services),
            operations=tuple(self._operations),
            service=as_column(self._service, np.int64),
            operation=as_column(self._operation, np.int64),
            start=as_column(self._ns, np.int64) / 1e9 if self._ns is not None else as_column(self._seconds, np.float64),
            duration_us=as_column(self._duration_us, np.float64),
            error=as_column(self._error, np.int8).astype(bool),
            own=own,
            parent=parent,
            keys=keys,
            span_ids=span_ids,
            span_id=span_id,
            parent_id=parent_id,
        )

    def _pairs(self, span_id: np.ndarray, parent_id: np.ndarray, ids: int) -> tuple[np.ndarray, np.ndarray, int]:
        """Each span's (trace, span id) and (trace, parent id) coded in the order they first appear (own
        before parent), -1 without a parent; and how many codes there are. Coded over the whole as
        numbers, ``trace * ids + id`` (below 2**63 while traces and ids are each below 3 billion)."""
        trace = as_column(self._trace, np.int64)
        pairs = np.empty(2 * len(trace), dtype=np.int64)
        pairs[0::2] = trace * ids + span_id
        pairs[1::2] = np.where(parent_id >= 0, trace * ids + parent_id, -1)
        named = pairs >= 0
        distinct, first, inverse = np.unique(pairs[named], return_index=True, return_inverse=True)
        rank = np.empty(len(distinct), dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(len(distinct))
        codes = np.full(len(pairs), -1, dtype=np.int64)
        codes[named] = rank[inverse.reshape(-1)]
        return _narrow(codes[0::2]), _narrow(codes[1::2]), len(distinct)


class SpanIds(Sequence[str]):
    """Distinct span ids, a sequence of texts: held as one numpy array of bytes where every id is ASCII
    without a NUL (a few bytes an id, where a Python text takes about 65), else as a tuple of texts.
    Each id is made a text as it is read. Immutable."""

    __slots__ = ("_ids",)

    def __init__(self, ids: np.ndarray | tuple[str, ...]) -> None:
        if isinstance(ids, np.ndarray):
            ids.flags.writeable = False
        self._ids = ids

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        value = self._ids[index]
        return value.decode("ascii") if isinstance(value, bytes) else value

    def __iter__(self) -> Iterator[str]:
        if isinstance(self._ids, tuple):
            return iter(self._ids)
        return (value.decode("ascii") for value in self._ids.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # as the list of ids it stands for

    def __repr__(self) -> str:
        return f"SpanIds({list(self)!r})"

    def codes(self, ids: Sequence[str]) -> np.ndarray:
        """Each of ``ids``' index among these ids (int64), -1 where it is none of them."""
        if isinstance(self._ids, tuple) or not len(self._ids):
            index = {span_id: code for code, span_id in enumerate(self._ids)}
            return np.fromiter(map(index.get, ids, repeat(-1)), dtype=np.int64, count=len(ids))
        found = np.full(len(ids), -1, dtype=np.int64)
        asked = [i for i, span_id in enumerate(ids) if span_id.isascii() and "\0" not in span_id]
        if not asked:
            return found
        wanted = np.array([ids[i] for i in asked], dtype="S")
        order = np.argsort(self._ids, kind="stable")
        at = order[np.minimum(np.searchsorted(self._ids, wanted, sorter=order), len(order) - 1)]
        hit = self._ids[at] == wanted
        found[np.array(asked, dtype=np.int64)[hit]] = at[hit]
        return found


def _as_bytes(texts: list[str]) -> np.ndarray | None:
    """``texts`` as an array of bytes, or None where one is not ASCII or holds a NUL (which the array
    would drop from its end)."""
    joined = "".join(texts)
    if not joined.isascii() or "\0" in joined:
        return None
    return np.array(texts, dtype="S") if texts else np.zeros(0, dtype="S1")


def _narrow(codes: np.ndarray) -> np.ndarray:
    """Codes (at least -1) as int32 where they fit, else int64, contiguous."""
    return codes.astype(np.int32) if not len(codes) or codes.max() < 2**31 else codes.copy()


_Text = TypeVar("_Text", bound=Hashable)


def coded(table: dict[_Text, int], values: Sequence[_Text | None]) -> array[int]:
    """Each value's code in ``table``, new values given the next codes in the order they first appear;
    ``None`` is -1 and gets no code."""
    new: list[Any] = list(filterfalse(table.__contains__, dict.fromkeys(values)))
    if None in new:
        new.remove(None)
    table.update(zip(new, range(len(table), len(table) + len(new)), strict=True))
    lookup: dict[Any, int] = table  # None is looked up too, and found missing
    return array("q", map(lookup.get, values, repeat(-1)))


def as_column(values: array[int] | array[float], dtype: type[np.generic]) -> np.ndarray:
    """An array built a value at a time as a numpy column, without a copy (its buffer shared)."""
    return np.frombuffer(values, dtype=dtype) if len(values) else np.zeros(0, dtype=dtype)
