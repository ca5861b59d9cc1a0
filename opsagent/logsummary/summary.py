"""The streaming summariser: log records in, one :class:`~opsagent.models.LogsData` out.

One pass over the records with bounded state: exact counts by level, service and keyword family,
a time histogram, templates mined as the lines arrive (with the values their variable positions
held), then what is new, bursting or vanished against the baseline, and the lines worth reading
whole. Nothing is truncated and no count is dropped: lines past the template limit land in an
explicit "other" bucket. It does no I/O and never renders text (that is :mod:`.render`).
"""

from __future__ import annotations

import gc
import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import count, islice
from typing import NamedTuple, Protocol, TypeVar

from ahocorasick_rs import AhoCorasick

from opsagent.logsummary.families import SHAPE, families_of_shape, numeric_families, resolve, shape_of
from opsagent.logsummary.levels import SEVERITY, UNKNOWN, normalise_level
from opsagent.logsummary.lines import LineParser
from opsagent.logsummary.masking import MAX_LINE, Masker, is_masked
from opsagent.logsummary.mining import WILDCARD, Template, TemplateMiner, combined
from opsagent.models import LogsData, LogTemplate, TimeRange
from opsagent.redaction import HINTS, Redactor, gate_words, redact, redactors

#: Distinct values tracked per variable position of a template; later ones are not listed.
MAX_VALUES = 32
#: Values shown per variable position.
TOP_VALUES = 5
#: A message longer than this is counted as an oddity (and mined on its first line's start).
MAX_MESSAGE = 64 * 1024
_DIGIT = re.compile(r"\d")
#: Distinct masked messages a summary remembers the tally of (bounded state on endless streams).
_MAX_KEYS = 100_000
_HISTOGRAM_STEPS_S = (60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)
_HISTOGRAM_BUCKETS = 60
_ERRORS = frozenset({"error", "fatal"})
#: Records of a stream (not a list) read between two collections of the young generations while the
#: cyclic garbage collector is paused (see _collector_paused): bounds the garbage cycles a stream's
#: producer may leave meanwhile (a caught exception's traceback is one) to what 65,536 records make.
_COLLECT_EVERY = 1 << 16
_T = TypeVar("_T")


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


class _Shape(NamedTuple):
    """What all messages of one shape (the same but for their digits) have in common."""

    key: tuple[str, ...]
    kid: int
    groups: tuple[int, ...] | None  # raw tokens per masked token, when spaced variables were joined
    verbatim: tuple[int, ...]  # positions masked again from the message: their mask holds digits
    hexes: tuple[int, ...]  # positions masked again if the message's digit before an x is not 0
    families: tuple[str, ...]  # the families that do not depend on digits, resolved
    maybe: tuple[str, ...]  # numeric families to check on each message
    clean: bool  # every message of this shape passes redaction unchanged (see LogSummariser._clean)
    redactors: tuple[Redactor, ...]  # when not clean: the redactors whose words the shape holds (see _steps)
    oddities: tuple[str, ...]  # the same for every message of the shape: none depends on a digit
    plain: bool  # clean, and nothing above depends on the message's own digits: its key is the shape's


def _verbatim(key: tuple[str, ...], raw_shape: tuple[str, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Positions whose mask depends on the message's own digits: tokens that keep digits once masked
    (pod-7f9c, v2), and tokens whose shape reads 0x (a hex prefix only where the digit really is 0)."""
    digits, hexes = [], []
    for i, (t, r) in enumerate(zip(key, raw_shape, strict=True)):
        if t.isalpha():
            continue
        # a shape writes every ASCII digit 0: one substring test, not a search (other digits, ٣, are kept)
        if "0" in t if t.isascii() else _DIGIT.search(t):
            digits.append(i)
        elif "0x" in r or "0X" in r:
            hexes.append(i)
    return tuple(digits), tuple(hexes)


def _hex_prefixes(token: str) -> int:
    return token.lower().count("0x")


def _regroup(tokens: list[str], groups: tuple[int, ...]) -> list[str]:
    out, i = [], 0
    for n in groups:
        out.append(" ".join(tokens[i : i + n]))
        i += n
    return out


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused while a summary is made.

    What a summary allocates (tuples of tokens, tallies, templates) makes no reference cycles, and
    the records it is given are alive throughout, yet each full collection the allocations trigger
    walks every object of the process: the records, and in a replay the whole recording. On 300,000
    unique-heavy loghub lines the collector took 0.4 to 0.6 s of a 3 s summary. The switch is the
    process's: another thread's garbage cycles wait for the summary's end (seconds, and a stream's
    are collected as it is read, see _collecting). Left as it was when the caller had paused it.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _collecting(records: Iterable[_T]) -> Iterable[_T]:
    """The records as they come; a stream's with a collection of the young generations (where new
    garbage cycles are) every :data:`_COLLECT_EVERY` records, a list's untouched (it makes none)."""
    if isinstance(records, list | tuple):
        return records
    return _every(iter(records))


def _every(records: Iterator[_T]) -> Iterator[_T]:
    for first in records:
        yield first
        yield from islice(records, _COLLECT_EVERY - 1)
        gc.collect(1)


class _Parsed(NamedTuple):
    """What a message is, whatever its timestamp: computed once per distinct message."""

    key: tuple[str, ...]
    kid: int  # the key's number: cheaper to look up than the key
    shape_kid: int  # the number of its shape's key (the same, unless tokens were masked again)
    raw: tuple[str, ...]
    families: tuple[str, ...]
    oddities: tuple[str, ...]


#: Builds a :class:`_Parsed` from a tuple of its fields in their order: a NamedTuple's own
#: constructor is a Python function, and calling it was about a quarter of the work a distinct
#: message whose shape is known (measured over the 212,394 messages of the benchmark's 300k lines).
_new = tuple.__new__


@dataclass(eq=False, slots=True)
class _Tally:
    """Everything counted for one template (or for the "other" bucket, ``template is None``)."""

    template: Template | None
    first: datetime
    last: datetime
    first_line: LogLike
    last_line: LogLike
    first_in_window: LogLike | None = None
    window: int = 0
    baseline: int = 0
    lines: dict[tuple[str, str, bool], int] = field(default_factory=dict)  # by level, service, in window
    positions: list[int] = field(default_factory=list)
    values: dict[int, dict[str, int]] = field(default_factory=dict)
    columns: list[tuple[int, dict[str, int]]] = field(default_factory=list)  # values' items, for the hot loop
    partial: set[int] = field(default_factory=set)  # positions with uncounted values

    @property
    def count(self) -> int:
        return self.window + self.baseline

    def track(self, position: int, values: dict[str, int]) -> None:
        self.positions.append(position)
        self.values[position] = values
        self.columns.append((position, values))


class LogSummariser:
    """Streaming summariser with Drain-style template mining (see :mod:`.mining`).

    ``max_templates`` templates are listed, highest information first; ``template_limit`` bounds
    the templates mined. Caches (masked messages, levels) are kept across calls: the same records
    are often summarised for several scopes.
    """

    def __init__(
        self,
        *,
        max_templates: int = 15,
        samples: int = 3,
        burst_ratio: float = 3.0,
        template_limit: int = 2000,
        head: int = 3,
        cache_size: int = 50_000,
        message_cache_size: int = 8_192,
        redaction: Sequence[Redactor] | None = None,
    ) -> None:
        self.max_templates = max_templates
        self.samples = samples
        self.burst_ratio = burst_ratio
        self.template_limit = template_limit
        self.head = head
        self.cache_size = cache_size
        #: parsed messages remembered (shapes, masked tokens and keys: ``cache_size``). A message is cheap
        #: to parse again once its shape is known, and its raw tokens were most of the summariser's
        #: memory: 8,192 instead of 50,000 took the peak of 300k unique-heavy loghub lines from 58 to
        #: 42 MiB at the same CPU time, and cost nothing on the x16 TrainTicket replay (10,254 distinct
        #: messages summarised in 116 calls); 2,048 made that replay's summaries three times slower.
        self.message_cache_size = message_cache_size
        #: secrets are masked before a message is mined: a template, or the values one of its variable
        #: positions held (``X-Api-Key: <*>`` → the keys), would otherwise carry them past every door
        self._redaction = list(redactors() if redaction is None else redaction)
        #: redaction's gate over shapes: each word with its digits written 0, as a shape writes them.
        #: A message's match of a word is, character for character, a match of the word's shape in
        #: the message's shape, so a shape the search finds nothing in holds messages that the chain
        #: passes unchanged: they skip redaction (most distinct lines of a stream share a shape).
        words = gate_words(self._redaction)
        #: (the words searched at once by Aho-Corasick, as the shapes' keyword hints are: on nezha's
        #: long lines a fifth of the time of the regular expression that redaction's own gate runs)
        shaped = None if words is None or "" in words else sorted({w.translate(SHAPE) for w in words})
        self._clean = None if shaped is None else AhoCorasick(shaped)
        #: each redactor with its words as a shape writes them (see _steps); None if one names none
        self._steps_words = (
            None
            if words is None
            else [(step, tuple(w.translate(SHAPE) for w in getattr(step, HINTS))) for step in self._redaction]
        )
        self._masker = Masker(cache_size=cache_size)
        self._parsed: dict[str, _Parsed] = {}
        self._shapes: dict[str, _Shape] = {}
        #: one copy of each tuple the shapes hold (raw tokens per masked token, positions, families):
        #: shapes of one event share them, and their copies were 3 MiB of 22,717 shapes (300k loghub lines)
        self._positions: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._names: dict[tuple[str, ...], tuple[str, ...]] = {}
        #: a number per masked key; never reused, so a run's tallies stay right if the cache is cleared
        self._key_ids: dict[tuple[str, ...], int] = {}
        self._next_key_id = count()
        self._levels: dict[str, str] = {}

    def summarise(
        self, records: Iterable[LogLike], *, baseline: TimeRange, window: TimeRange, service: str | None
    ) -> LogsData:
        run = _Run(self, baseline=baseline, window=window)
        with _collector_paused():
            run.feed(_collecting(records))
            return run.finish(service)

    def summarise_lines(
        self,
        lines: Iterable[str | bytes],
        *,
        baseline: TimeRange,
        window: TimeRange,
        service: str | None,
        parser: LineParser | None = None,
    ) -> LogsData:
        """Raw text lines (JSON, logfmt, plain, or worse), parsed on the way; oddities are counted."""
        parser = parser or LineParser(service=service or "unknown", default_ts=baseline.start)
        data = self.summarise(parser.parse(lines), baseline=baseline, window=window, service=service)
        oddities = Counter(data.oddities)
        oddities.update(parser.counts)
        return data.model_copy(update={"oddities": dict(sorted(oddities.items()))})

    def templates_of(self, messages: Iterable[str]) -> list[str | None]:
        """The id of the template each message belongs to when these messages are mined in this order,
        as :meth:`summarise` mines them (``None``: past the template limit, the "other" bucket)."""
        miner = TemplateMiner(max_templates=self.template_limit)
        by_key: dict[int, int] = {}  # a key's template index, -1 past the template limit
        by_shape: dict[int, Template] = {}
        assigned: list[int] = []
        parsed_get, remember = self._parsed.get, self._remember
        with _collector_paused():
            for message in _collecting(messages):
                p = parsed_get(message)
                if p is None:
                    p = remember(message)
                index = by_key.get(p.kid)
                if index is None:
                    likely = by_shape.get(p.shape_kid) if p.shape_kid != p.kid else None
                    found = miner.add(p.key, likely=likely)[0]
                    index = by_key[p.kid] = found.index if found is not None else -1
                    if found is not None and p.shape_kid != p.kid:
                        by_shape[p.shape_kid] = found
                assigned.append(index)
        roots = miner.merged()
        members: dict[int, list[Template]] = {}
        for t in miner.templates:
            members.setdefault(roots[t.index], []).append(t)
        ids = {root: template_id(" ".join(combined([t.tokens for t in group]))) for root, group in members.items()}
        return [ids[roots[i]] if i >= 0 else None for i in assigned]

    def parse(self, message: str) -> _Parsed:
        """The message's masked tokens, raw tokens, keyword families and oddities (remembered)."""
        hit = self._parsed.get(message)
        return self._remember(message) if hit is None else hit

    def _remember(self, message: str) -> _Parsed:
        """:meth:`parse` of a message not in the cache (callers on the hot path look it up themselves)."""
        hit = self._parse(message)
        if len(self._parsed) >= self.message_cache_size:
            self._parsed.clear()
        self._parsed[message] = hit
        return hit

    def _parse(self, message: str) -> _Parsed:
        # Masks and most families do not depend on which digits a message holds: they are worked out
        # once per shape (see families.SHAPE), which messages share far more often. Masks test whether
        # characters are digits, never which (save the 0 of 0x: see _verbatim).
        shape = shape_of(message)
        known = self._shapes.get(shape)
        # one search of the gate a shape, instead of the chain's own gate a message
        clean = known.clean if known is not None else self._is_clean(shape)
        if not clean:
            redacted = self._redacted(message, known.redactors if known is not None else self._steps(shape))
            if redacted != message:
                message, shape = redacted, shape_of(redacted)
                known = self._shapes.get(shape)
                clean = known.clean if known is not None else self._is_clean(shape)
        raw = message.partition("\n")[0][:MAX_LINE].split()
        if known is None:
            known = self._shape(shape, len(raw), clean=clean)
        elif known.plain:
            return _new(_Parsed, (known.key, known.kid, known.kid, tuple(raw), known.families, known.oddities))
        if known.groups is not None:
            raw = _regroup(raw, known.groups)
        key = known.key
        kid = shape_kid = known.kid
        again = known.verbatim
        if known.hexes:
            again += tuple(i for i in known.hexes if _hex_prefixes(raw[i]) != _hex_prefixes(shape_of(raw[i])))
        if again:
            own = list(key)
            for i in again:
                own[i] = self._masker.token(raw[i])
            key = tuple(own)
            kid = self._key_id(key)
        families = known.families
        if known.maybe:
            found = numeric_families(message, known.maybe)
            if found:  # the shape's families are resolved already
                families = tuple(resolve([*families, *found]))
        return _new(_Parsed, (key, kid, shape_kid, tuple(raw), families, known.oddities))

    def _steps(self, shape: str) -> tuple[Redactor, ...]:
        """The redactors that may change a message of ``shape``: those whose words (as a shape writes
        them) the shape holds. A redactor holding none of its words returns the text as it was."""
        if self._steps_words is None:
            return tuple(self._redaction)
        lower = shape.lower()
        return tuple(step for step, words in self._steps_words if any(w in lower for w in words))

    def _redacted(self, message: str, steps: tuple[Redactor, ...]) -> str:
        """``redact(message, chain)``: the chain's other redactors leave this message as it is, so when
        ``steps`` (see :meth:`_steps`) leave it too, so does the chain; when one masks something, the
        whole chain runs (a mask may hold another redactor's word). A message of a shape that redaction's
        gate does not pass went through every redactor of the chain: 20 us each on loghub's lines."""
        for step in steps:
            text, n = step(message)
            if n or text != message:
                return redact(message, self._redaction)[0]
        return message

    def _is_clean(self, shape: str) -> bool:
        """Whether redaction's gate passes every message of ``shape`` (see ``_clean``)."""
        return self._clean is not None and not self._clean.find_matches_as_indexes(shape.lower())

    def _shape(self, shape: str, tokens: int, *, clean: bool) -> _Shape:
        """What every message of ``shape`` has in common (remembered); ``tokens``: how many
        whitespace-separated tokens its first line holds; ``clean``: whether redaction's gate passes it."""
        key, raw_shape = self._masker.tokens(shape)
        sure, maybe = families_of_shape(shape)
        verbatim, hexes = _verbatim(key, raw_shape)
        groups = tuple(t.count(" ") + 1 for t in raw_shape) if len(raw_shape) != tokens else None
        # a digit is no space, no U+FFFD and one character: the oddities are the shape's own
        oddities: tuple[str, ...] = ()
        if not tokens:
            oddities += ("empty_message",)
        if len(shape) > MAX_MESSAGE:
            oddities += ("oversized",)
        if "\ufffd" in shape:
            oddities += ("replacement_characters",)
        positions, names = self._positions.setdefault, self._names.setdefault
        families, numeric = tuple(resolve(sure)), tuple(maybe)
        known = _Shape(
            key=key,
            kid=self._key_id(key),
            groups=None if groups is None else positions(groups, groups),
            verbatim=positions(verbatim, verbatim),
            hexes=positions(hexes, hexes),
            families=names(families, families),
            maybe=names(numeric, numeric),
            clean=clean,
            redactors=() if clean else self._steps(shape),
            oddities=oddities,
            plain=clean and groups is None and not verbatim and not hexes and not maybe,
        )
        if len(self._shapes) >= self.cache_size:
            self._shapes.clear()
            self._positions.clear()
            self._names.clear()
        self._shapes[shape] = known
        return known

    def _key_id(self, key: tuple[str, ...]) -> int:
        kid = self._key_ids.get(key)
        if kid is None:
            if len(self._key_ids) >= 2 * self.cache_size:
                self._key_ids.clear()
            kid = self._key_ids[key] = next(self._next_key_id)
        return kid

    def level(self, raw: str) -> str:
        """:func:`normalise_level`, remembered."""
        hit = self._levels.get(raw)
        if hit is None:
            hit = normalise_level(raw)
            if len(self._levels) < 10_000:
                self._levels[raw] = hit
        return hit


class _Run:
    """The state of one summary while the records stream through."""

    def __init__(self, owner: LogSummariser, *, baseline: TimeRange, window: TimeRange) -> None:
        self.owner = owner
        self.baseline = baseline
        self.window = window
        self.miner = TemplateMiner(max_templates=owner.template_limit)
        self.tallies: list[_Tally] = []
        self.other: _Tally | None = None
        self.by_key: dict[int, _Tally] = {}
        #: the template a message of each shape last joined, tried first for others of that shape
        self.by_shape: dict[int, Template] = {}
        self.fam_window: Counter[str] = Counter()
        self.fam_base: Counter[str] = Counter()
        self.oddities: Counter[str] = Counter()
        self.outside = 0
        start = min(baseline.start, window.start)
        span = (max(baseline.end, window.end) - start).total_seconds()
        step = next((s for s in _HISTOGRAM_STEPS_S if span / s <= _HISTOGRAM_BUCKETS), _HISTOGRAM_STEPS_S[-1])
        self.hist_start = start
        self.hist_step = step
        self.histogram = [0] * (int(span // step) + 1)
        self.error_histogram = [0] * len(self.histogram)

    def feed(self, records: Iterable[LogLike]) -> None:
        # The hot path: locals, no per-record function calls beyond cache look-ups.
        b0, b1, w0, w1 = self.baseline.start, self.baseline.end, self.window.start, self.window.end
        parsed_get = self.owner._parsed.get
        remember = self.owner._remember
        levels_get = self.owner._levels.get
        level_of = self.owner.level
        by_key = self.by_key
        fam_w, fam_b, oddities = self.fam_window, self.fam_base, self.oddities
        hist, err_hist, h0 = self.histogram, self.error_histogram, self.hist_start
        step = timedelta(seconds=self.hist_step)
        lo, hi, bucket = h0, h0 + step, 0
        max_values = MAX_VALUES
        for rec in records:
            ts = rec.ts
            if w0 <= ts < w1:
                in_window = True
            elif b0 <= ts < b1:
                in_window = False
            else:
                self.outside += 1
                continue
            message = rec.message
            p = parsed_get(message)
            if p is None:
                p = remember(message)
            raw_level = rec.level
            level = levels_get(raw_level)
            if level is None:
                level = level_of(raw_level)
            tally = by_key.get(p.kid)
            if tally is None:
                tally = self._assign(p, rec)
            lines = tally.lines
            k = (level, rec.service, in_window)
            lines[k] = lines.get(k, 0) + 1
            if in_window:
                tally.window += 1
                if tally.first_in_window is None:
                    tally.first_in_window = rec
                for f in p.families:
                    fam_w[f] += 1
            else:
                tally.baseline += 1
                for f in p.families:
                    fam_b[f] += 1
            if ts < tally.first:
                tally.first, tally.first_line = ts, rec
            if ts >= tally.last:
                tally.last, tally.last_line = ts, rec
            if not lo <= ts < hi:
                bucket = int((ts - h0) / step)
                lo = h0 + bucket * step
                hi = lo + step
            hist[bucket] += 1
            if level in _ERRORS:
                err_hist[bucket] += 1
            if p.oddities:
                oddities.update(p.oddities)
            if level == UNKNOWN:
                oddities["unknown_level"] += 1
            raw = p.raw
            for i, values in tally.columns:
                v = raw[i]
                n = values.get(v)
                if n is not None:
                    values[v] = n + 1
                elif len(values) < max_values:
                    values[v] = 1
                else:
                    tally.partial.add(i)

    def _assign(self, p: _Parsed, rec: LogLike) -> _Tally:
        if len(self.by_key) >= _MAX_KEYS:
            self.by_key.clear()  # a key seen again finds its template through the miner
            self.by_shape.clear()
        likely = self.by_shape.get(p.shape_kid) if p.shape_kid != p.kid else None
        template, widened = self.miner.add(p.key, likely=likely)
        if template is not None and p.shape_kid != p.kid:
            self.by_shape[p.shape_kid] = template
        if template is None:
            if self.other is None:
                self.other = _Tally(None, first=rec.ts, last=rec.ts, first_line=rec, last_line=rec)
            self.by_key[p.kid] = self.other
            return self.other
        if template.index == len(self.tallies):
            tally = _Tally(template, first=rec.ts, last=rec.ts, first_line=rec, last_line=rec)
            for i, t in enumerate(template.tokens):
                if t == WILDCARD or is_masked(t):
                    tally.track(i, {})
            self.tallies.append(tally)
        else:
            tally = self.tallies[template.index]
            for i, before in widened:
                if i not in tally.values:
                    # every line so far held the constant this position had
                    tally.track(i, {before: tally.count} if tally.count else {})
        self.by_key[p.kid] = tally
        return tally

    def finish(self, service: str | None) -> LogsData:
        groups = _merge(self.tallies, self.miner.merged())
        rate_scale = self.window.minutes / max(self.baseline.minutes, 1e-9)
        by_level: Counter[str] = Counter()
        by_service: Counter[str] = Counter()
        everything = [*groups, *([self.other] if self.other else [])]
        for tally in everything:
            for (level, svc, in_window), n in tally.lines.items():
                if in_window:
                    by_level[level] += n
                    by_service[svc] += n
        ranked = sorted(groups, key=lambda t: self._information_order(t, rate_scale))
        listed = [self._template(t, rate_scale) for t in ranked[: self.owner.max_templates]]
        other = self._template(self.other, rate_scale) if self.other else None
        vanished = sorted(
            (t for t in groups if t.window == 0 and t.baseline * rate_scale >= 5),
            key=lambda t: (-t.baseline, _text(t)),
        )[:5]
        top = ranked[: self.owner.head]
        total = sum(t.count for t in everything)
        return LogsData(
            service=service,
            total=total,
            by_level=dict(by_level.most_common()),
            by_service=dict(by_service.most_common()),
            families=dict(self.fam_window.most_common()),
            baseline_families=dict(self.fam_base.most_common()),
            templates=listed,
            samples=[t.sample for t in listed[: self.owner.samples]],
            window_minutes=self.window.minutes,
            baseline_minutes=self.baseline.minutes,
            templates_total=len(groups),
            unlisted=total - sum(t.count for t in listed) - (other.count if other else 0),
            other=other,
            vanished=[self._template(t, rate_scale) for t in vanished],
            head=[_line(r) for r in sorted((t.first_in_window or t.first_line for t in top), key=_ts)],
            tail=[_line(r) for r in sorted((t.last_line for t in top), key=_ts)],
            histogram_start=self.hist_start,
            histogram_step_s=self.hist_step,
            histogram=self.histogram,
            error_histogram=self.error_histogram,
            outside_range=self.outside,
            oddities=dict(sorted(self.oddities.items())),
        )

    def _flags(self, t: _Tally, rate_scale: float) -> tuple[bool, bool]:
        expected = t.baseline * rate_scale
        new = t.baseline == 0 and t.window >= 3
        bursting = t.window >= 5 and t.window >= self.owner.burst_ratio * max(expected, 1.0)
        return new, bursting

    def _information_order(self, t: _Tally, rate_scale: float) -> tuple[int, int, int, str]:
        """New and bursting errors, then errors, then warnings, then the rest; the busiest first."""
        worst = min((SEVERITY.get(level, 5) for level, _, _ in t.lines), default=5)
        new, bursting = self._flags(t, rate_scale)
        novel = new or bursting
        rank = (0 if novel else 1) if worst <= 1 else (2 if novel else 3) if worst == 2 else (4 if novel else 5)
        return rank, 0 if new else 1 if bursting else 2, -t.window, _text(t)

    def _template(self, t: _Tally, rate_scale: float) -> LogTemplate:
        new, bursting = self._flags(t, rate_scale) if t.template else (False, False)
        levels: Counter[str] = Counter()
        services: Counter[str] = Counter()
        for (level, svc, _), n in t.lines.items():
            levels[level] += n
            services[svc] += n
        text = _text(t)
        tokens = t.template.tokens if t.template else []
        values = [
            {
                _variable_part(v, tokens[i]): n
                for v, n in sorted(t.values[i].items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_VALUES]
            }
            for i in sorted(t.positions)
        ]
        return LogTemplate(
            id=template_id(text) if t.template else "other",
            template=text,
            count=t.count,
            baseline_count=t.baseline,
            window_count=t.window,
            first_seen=t.first,
            last_seen=t.last,
            levels=sorted(levels, key=lambda lv: SEVERITY.get(lv, 5)),
            services=[s for s, _ in services.most_common(5)],
            sample=(t.first_in_window or t.first_line).message,
            new=new,
            bursting=bursting,
            values=values,
            values_partial=[k for k, i in enumerate(sorted(t.positions)) if i in t.partial],
        )


def _variable_part(value: str, token: str) -> str:
    """``504`` of ``status=504`` where the template says ``status=<NUM>``: the constant around the
    variable is the template's, not the value's."""
    if token == WILDCARD or "<" not in token:
        return value
    prefix, suffix = token[: token.index("<")], token[token.rindex(">") + 1 :]
    if len(value) > len(prefix) + len(suffix) and value.startswith(prefix) and value.endswith(suffix):
        return value[len(prefix) : len(value) - len(suffix)]
    return value


def template_id(text: str) -> str:
    """Stable for the same template text: ids are cited as evidence."""
    return "t" + hashlib.sha1(text.encode()).hexdigest()[:8]


def _text(t: _Tally) -> str:
    return t.template.text if t.template else "(no template: the template limit was reached)"


def _ts(rec: LogLike) -> datetime:
    return rec.ts


def _line(rec: LogLike) -> str:
    return f"{rec.ts:%H:%M:%S} {rec.service} {normalise_level(rec.level)}: {rec.message}"


def _merge(tallies: list[_Tally], roots: list[int]) -> list[_Tally]:
    """One tally per template once siblings and duplicates are merged (see TemplateMiner.merged);
    ``tallies[i]`` is the tally of the miner's template ``i``."""
    members: dict[int, list[_Tally]] = {}
    for i, tally in enumerate(tallies):
        members.setdefault(roots[i], []).append(tally)
    return [group[0] if len(group) == 1 else _combine(group) for group in members.values()]


def _combine(group: list[_Tally]) -> _Tally:
    tokens = combined([t.template.tokens for t in group if t.template])
    head = group[0]
    merged = _Tally(
        Template(index=head.template.index if head.template else -1, tokens=tokens),
        first=min(t.first for t in group),
        last=max(t.last for t in group),
        first_line=min((t.first_line for t in group), key=_ts),
        last_line=max((t.last_line for t in group), key=_ts),
        first_in_window=min((t.first_in_window for t in group if t.first_in_window), key=_ts, default=None),
    )
    for i, tok in enumerate(tokens):
        if tok == WILDCARD or is_masked(tok):
            merged.track(i, {})
    for t in group:
        merged.window += t.window
        merged.baseline += t.baseline
        for k, n in t.lines.items():
            merged.lines[k] = merged.lines.get(k, 0) + n
        merged.partial |= t.partial
        for i in merged.positions:
            own = t.values.get(i)
            if own is None and t.template is not None:
                own = {t.template.tokens[i]: t.count}
            into = merged.values[i]
            for v, n in (own or {}).items():
                if v in into or len(into) < MAX_VALUES:
                    into[v] = into.get(v, 0) + n
                else:
                    merged.partial.add(i)
    return merged
