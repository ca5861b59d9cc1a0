"""Steps a component stopped taking: the expected next step of its requests, from traces and logs.

Each span of a component is a short sequence of steps: the operation it serves, the log lines it
writes (by span id) and the calls it makes, in time order. In code that works, what follows a step is
nearly fixed (the controller's line is followed by the service's line, the call to the price service
by the line that prices the trip). A code fault removes expected behaviour: an exception cuts the
request short, so a step that used to follow another now rarely does, while the step before it still
happens. Comparing the share of a step's successors before and after onset does not depend on how
much traffic came, only on what the code did with it; the step counts come from the incident.

A component's callers' spans change too (they log the failure instead of their next step), but the
component's own broken transition is usually the sharpest one: the fault-mechanism detector
(:mod:`opsagent.mechanisms`) judges each component's sharpest shortfall against the other components
of the same incident. Pure functions; no I/O.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import overload

import numpy as np

from opsagent.analysis.columns import SpanColumns, as_column, coded
from opsagent.fixtures import Span, unix
from opsagent.logsummary.masking import Masker
from opsagent.logsummary.mining import TemplateMiner
from opsagent.models import Incident, StepShortfall

#: A step seen fewer times than this before onset (or after) says nothing about what follows it.
MIN_STEPS = 3
#: A successor expected fewer times than this after onset cannot be missed measurably.
MIN_EXPECTED = 3.0
#: An alert fires once its condition has held for its pending period (Prometheus' ``for:``, commonly a
#: minute), so the requests the fault changed began about that much before the alert's start: spans
#: from then on count as after onset.
ALERT_LEAD_S = 60.0
#: A successor is a step's usual one when it followed the step at least this often before onset: only
#: what the code used to do can go missing (a successor that followed now and then says which requests
#: came, the traffic mix).
USUAL = 0.5
#: Two lines are one log statement when this share of their tokens agree: values printed by one
#: statement vary in a token or two, while different statements of one class (masked line numbers
#: alike) differ in most of their words. Stricter than the summariser's grouping, which gathers lines
#: for a reader rather than telling a program's steps apart.
STATEMENT_SIMILARITY = 0.8
#: A successor that followed a step at least this often before onset is a path the code already took
#: (a branch by request: which train, which user): when such a successor takes the place of the usual
#: one after onset, which requests came changed, not what the code does with them.
ESTABLISHED = 0.05
#: A successor that followed a step in at least FIXED_PATH of at least FIXED_PATH_MIN requests before
#: onset is the code's fixed path (were it followed only 7 times in 10, 8 in a row would happen 6 % of
#: the time); it is broken when it follows in at most BROKEN_SHARE of at least BROKEN_MIN requests after
#: onset (were the path intact at FIXED_PATH, that would happen under 1 % of the time), however unsure
#: the exact test on so few requests.
FIXED_PATH, FIXED_PATH_MIN = 0.9, 8
BROKEN_SHARE, BROKEN_MIN = 0.5, 5
#: Where a span's steps end. (Which step comes *first* is not counted: among log lines without their
#: span's operation it says which requests came, the traffic mix, not what the code did with them.)
END = "(end)"


#: Where a logger prints the code location of its statement: a package-qualified logger and line
#: (``t.s.OrderServiceImpl#451``, logback's ``%logger#%line``) or a source file and line
#: (``OrderService.java:451``, ``handler.go:88``, ``views.py:12``), among the line's first words (its
#: prefix; a value in the message body that looks alike is not the statement's location).
CODE_LOCATION = re.compile(
    r"(?:^|(?<=[\s\[(]))(?:"
    r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+#\d+"
    r"|[\w./-]*\w\.(?:java|kt|scala|groovy|go|py|rb|js|mjs|ts|cs|php|cpp|cc|c|rs|ex|exs):\d+"
    r")(?=[\s\]):,]|$)"
)
#: A line's prefix: its first six words (date, time, thread, level, logger, location in the common
#: layouts of logback, log4j, Go's log and klog).
PREFIX = re.compile(r"\s*(?:\S+\s+){0,5}\S+")


def code_location(message: str) -> str | None:
    """The code location a log line names in its prefix (CODE_LOCATION, PREFIX), if any."""
    prefix = PREFIX.match(message)
    found = CODE_LOCATION.search(message, 0, prefix.end()) if prefix else None
    return found.group(0) if found else None


@dataclass(frozen=True, slots=True)
class StepLine:
    """One log line of a span: when, whose, which span, and its template (variables masked)."""

    ts: float
    service: str
    span_id: str
    template: str


class StepLines(Sequence[StepLine]):
    """Step lines as columns: each line's time, and its component, span id and template coded as
    numbers into the distinct texts. A large recording has a step line for most of its log lines, and
    one object a line (with its time's float) was the largest thing the trace summary kept. A sequence
    of :class:`StepLine` to every reader, made as it is read. Immutable."""

    __slots__ = ("service", "services", "span_id", "span_ids", "template", "templates", "ts")

    def __init__(
        self,
        *,
        ts: np.ndarray,
        services: Sequence[str],
        service: np.ndarray,
        span_ids: Sequence[str],
        span_id: np.ndarray,
        templates: Sequence[str],
        template: np.ndarray,
    ) -> None:
        self.ts = ts  # float64, unix seconds
        self.services = tuple(services)  # the distinct components; ``service[i]`` indexes them
        self.service = service  # int32
        self.span_ids = tuple(span_ids)  # the distinct span ids, in the order lines first name them
        self.span_id = span_id  # int32
        self.templates = tuple(templates)  # the distinct templates; ``template[i]`` indexes them
        self.template = template  # int32
        for column in (ts, service, span_id, template):
            column.flags.writeable = False

    @classmethod
    def of(cls, lines: Iterable[StepLine]) -> StepLines:
        """Step lines given one object a line, as columns (the same lines, in the same order)."""
        if isinstance(lines, StepLines):
            return lines
        held = lines if isinstance(lines, Sequence) else list(lines)
        services: dict[str, int] = {}
        span_ids: dict[str, int] = {}
        templates: dict[str, int] = {}
        service = as_column(coded(services, [line.service for line in held]), np.int64).astype(np.int32)
        span_id = as_column(coded(span_ids, [line.span_id for line in held]), np.int64).astype(np.int32)
        template = as_column(coded(templates, [line.template for line in held]), np.int64).astype(np.int32)
        return cls(
            ts=np.fromiter((line.ts for line in held), dtype=np.float64, count=len(held)),
            services=list(services),
            service=service,
            span_ids=list(span_ids),
            span_id=span_id,
            templates=list(templates),
            template=template,
        )

    def __len__(self) -> int:
        return len(self.ts)

    @overload
    def __getitem__(self, index: int) -> StepLine: ...

    @overload
    def __getitem__(self, index: slice) -> list[StepLine]: ...

    def __getitem__(self, index: int | slice) -> StepLine | list[StepLine]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return StepLine(
            ts=float(self.ts[index]),
            service=self.services[self.service[index]],
            span_id=self.span_ids[self.span_id[index]],
            template=self.templates[self.template[index]],
        )

    def __iter__(self) -> Iterator[StepLine]:
        services, span_ids, templates = self.services, self.span_ids, self.templates
        for ts, service, span_id, template in zip(
            self.ts.tolist(), self.service.tolist(), self.span_id.tolist(), self.template.tolist(), strict=True
        ):
            yield StepLine(ts=ts, service=services[service], span_id=span_ids[span_id], template=templates[template])


def step_lines(records: Iterable[tuple[float, str, str, str]]) -> StepLines:
    """Log lines ``(ts, service, span id, message)`` as steps (see :func:`step_columns`)."""
    listed = records if isinstance(records, list) else list(records)
    return step_columns(
        ts=np.fromiter((r[0] for r in listed), dtype=np.float64, count=len(listed)),
        service=[r[1] for r in listed],
        span_id=[r[2] for r in listed],
        message=[r[3] for r in listed],
    )


#: A line that names no code location: each such line is mined, in order.
_MINED = -1


def step_columns(
    *, ts: np.ndarray, service: Sequence[str], span_id: Sequence[str], message: Sequence[str]
) -> StepLines:
    """Log lines given as columns (each line's time in unix seconds, component, span id and text) as
    steps. A line that names the code location of its statement (:func:`code_location`) is that
    statement, whatever values it prints: one step per location, labelled with the first such line's
    text (masked) and the location. Any other line is the template it joins among its component's
    lines (mined Drain-style, so a statement that prints a varying value is one step, not one per
    value; a statement that prints many varying values can split, which a printed location avoids).

    A statement prints the same text again and again (every request that takes the step), and a located
    line's step depends on its component and location alone: each distinct text is searched for its
    location once, and each (component, location) labelled once, in the order lines first give them
    (so steps are numbered as reading one line at a time numbers them); only lines without a location
    are read one at a time, in order, by their component's miner."""
    masker = Masker()
    # masking is a function of the text alone, so each distinct text is masked once (a bounded memo)
    masked: dict[str, tuple[str, ...]] = {}

    def mask(text: str) -> tuple[str, ...]:
        tokens = masked.get(text)
        if tokens is None:
            if len(masked) >= masker.cache_size:
                masked.clear()
            tokens = masked[text] = masker.tokens(text)[0]
        return tokens

    services: dict[str, int] = {}
    span_ids: dict[str, int] = {}
    texts: dict[str, int] = {}
    line_service = as_column(coded(services, service), np.int64)
    line_span = as_column(coded(span_ids, span_id), np.int64).astype(np.int32)
    line_text = as_column(coded(texts, message), np.int64)
    # the code location each distinct text names (-1 for none), looked for once a text
    locations: dict[str, int] = {}
    where_of = [code_location(text) for text in texts]
    text_where = np.array(
        [-1 if w is None else locations.setdefault(w, len(locations)) for w in where_of], dtype=np.int64
    )
    del where_of
    line_where = text_where[line_text] if len(line_text) else line_text
    del line_text, text_where
    templates: dict[str, int] = {}  # a step's template -> its code
    other = templates.setdefault("(other)", len(templates))  # a mined line that joined no template
    # a located line's step: one per (component, location), labelled with the first such line's text,
    # numbered in the order lines first give them
    located = np.flatnonzero(line_where >= 0)
    width = max(len(locations), 1)
    keys, first, inverse = np.unique(
        line_service[located] * width + line_where[located], return_index=True, return_inverse=True
    )
    where_names = list(locations)
    key_step = np.empty(len(keys), dtype=np.int32)
    for k in np.argsort(first, kind="stable").tolist():
        label = f"{' '.join(mask(message[located[first[k]]]))} (at {where_names[keys[k] % width]})"
        key_step[k] = templates.setdefault(label, len(templates))
    # a line's step: its template's code, or for a mined line -2 less its template's index among its
    # component's (known once every line is mined and siblings merged)
    line_template = np.full(len(line_where), _MINED, dtype=np.int32)
    line_template[located] = key_step[inverse.reshape(-1)]
    del line_where, located, keys, first, inverse, key_step
    miners: dict[str, TemplateMiner] = {}
    for i in np.flatnonzero(line_template == _MINED).tolist():
        miner = miners.get(service[i])
        if miner is None:
            miner = miners[service[i]] = TemplateMiner(similarity=STATEMENT_SIMILARITY)
        template, _ = miner.add(mask(message[i]))
        line_template[i] = -2 - template.index if template is not None else other
    # each component's mined templates one after another: a mined line's template is found at its
    # component's offset plus the template's index
    offset = np.zeros(len(services), dtype=np.int64)
    mined_texts: list[int] = []
    for name, miner in miners.items():
        offset[services[name]] = len(mined_texts)
        mined_texts.extend(templates.setdefault(miner.templates[r].text, len(templates)) for r in miner.merged())
    mined = np.flatnonzero(line_template <= -2)
    line_template[mined] = np.array(mined_texts, dtype=np.int32)[offset[line_service[mined]] - 2 - line_template[mined]]
    return StepLines(
        ts=np.asarray(ts, dtype=np.float64),
        services=list(services),
        service=line_service.astype(np.int32),
        span_ids=list(span_ids),
        span_id=line_span,
        templates=list(templates),
        template=line_template,
    )


def _transitions(
    spans: SpanColumns,
    lines: StepLines,
    *,
    onset: float,
    window: tuple[float, float],
    baseline: tuple[float, float],
) -> Counter[tuple[str, str, str, str]]:
    """How often each step was followed by each next one: ``(period, component, step, next step)`` ->
    count, a span counted in the period its start falls in (``after`` onset, else ``baseline``, else
    ``pre``: between the window's start and onset; a span in none is left out).

    A span's steps are the operation it serves (at its start), the log lines it writes and the calls it
    makes (at each callee's start), in time order, then END; a parent outside the recording has no
    steps of its own. Spans, components and steps are coded as numbers, and the steps ordered and their
    pairs counted as arrays (numpy): a large recording has hundreds of thousands of spans and a few
    thousand distinct steps, and a list of step labels per span set the peak of its investigation. The
    spans and the lines come as columns (:class:`~opsagent.analysis.columns.SpanColumns`, read once for
    every analysis of them, and :class:`StepLines`)."""
    services = {service: code for code, service in enumerate(spans.services)}  # component -> its number
    labels: dict[str, int] = {}  # step label -> its number
    served = [labels.setdefault(f"serves {op}", len(labels)) for op in spans.operations]
    serves = np.array(served, dtype=np.int32)[spans.operation]
    # the calls: a span with a parent is a step of its parent's, at its own start
    child = np.flatnonzero(spans.parent_id >= 0)
    n_ops = max(len(spans.operations), 1)
    callee, called = np.unique(spans.service[child] * n_ops + spans.operation[child], return_inverse=True)
    calls = [
        labels.setdefault(f"calls {spans.services[c // n_ops]} {spans.operations[c % n_ops]}", len(labels))
        for c in callee.tolist()
    ]
    # the templates the lines log, numbered in the order they are first logged
    used, first = np.unique(lines.template, return_index=True)
    used = used[np.argsort(first, kind="stable")]
    logs = np.zeros(len(lines.templates), dtype=np.int32)
    logs[used] = [labels.setdefault(f"logs {lines.templates[t]}", len(labels)) for t in used.tolist()]
    logged = logs[lines.template]
    del used, first, logs
    # A span is numbered by its span id's code in the spans' columns; a span id that lines name and no
    # span has gets the next number, in the order the lines first name it. The lines' few distinct span
    # ids are looked up among the spans', rather than every span's id among a table of them all.
    number = spans.span_ids.codes(lines.span_ids)
    alone = np.flatnonzero(number < 0)
    number[alone] = len(spans.span_ids) + np.arange(len(alone))
    n_spans = len(spans.span_ids) + len(alone)
    line_span = number[lines.span_id].astype(np.int32)  # as the events' span column below
    del number, alone
    # by span number: its component's number (-1 for a span known only as a parent) and when it began;
    # a span id given twice is owned by its last span, one that no span has by its first line
    last = spans.last_of(spans.span_id, n_spans)
    owned = np.flatnonzero(last >= 0)
    owner = np.full(n_spans, -1, dtype=np.int64)
    began = np.zeros(n_spans, dtype=np.float64)
    owner[owned], began[owned] = spans.service[last[owned]], spans.start[last[owned]]
    codes, first = np.unique(line_span, return_index=True)
    unowned = owner[codes] < 0
    codes, first = codes[unowned], first[unowned]
    line_services = lines.service[first].tolist()
    owner[codes] = [services.setdefault(lines.services[s], len(services)) for s in line_services]
    began[codes] = lines.ts[first]
    del last, owned, codes, first, unowned, line_services
    # each span's period (0 after, 1 baseline, 2 before onset) and component as one number; -1 for a
    # span in no period, or a parent outside the recording
    period = np.full(n_spans, -1, dtype=np.int64)
    (w0, w1), (b0, b1) = window, baseline
    period[(w0 <= began) & (began < onset)] = 2
    period[(b0 <= began) & (began < b1)] = 1
    period[(onset <= began) & (began < w1)] = 0
    whose_span = np.where((period < 0) | (owner < 0), -1, period * len(services) + owner).astype(np.int32)
    del period, owner, began
    end = labels.setdefault(END, len(labels))
    if not n_spans:
        return Counter()
    texts = list(labels)
    # a span's steps in the order of (time, kind, label), as the tuples (t, kind, label) sort: the kind
    # (0 serves, 1 logs, 2 calls) and the label's rank among the labels' texts as one number
    by_rank = np.array(sorted(range(len(texts)), key=texts.__getitem__), dtype=np.int32)
    rank = np.empty(len(texts), dtype=np.int32)
    rank[by_rank] = np.arange(len(texts), dtype=np.int32)
    stride = len(texts)  # a kind's ranks begin at the kind times the number of labels
    ev_step = np.concatenate(
        (
            rank[serves],
            rank[np.array(calls, dtype=np.int32)[called].reshape(-1)] + 2 * stride,
            rank[logged] + stride,
        )
    )
    del served, serves, callee, called, logged
    # int32: a recording of fewer than two billion span ids
    ev_span = np.concatenate((spans.span_id, spans.parent_id[child], line_span)).astype(np.int32)
    ev_t = np.concatenate((spans.start, spans.start[child], lines.ts))
    del child, line_span
    order = np.lexsort((ev_step, ev_t, ev_span))
    del ev_t
    span = ev_span[order]
    del ev_span
    label = ev_step[order]
    label %= stride
    label = by_rank[label]
    del order, ev_step
    following = np.empty_like(label)
    following[:-1] = label[1:]
    last_step = np.ones(len(span), dtype=bool)
    last_step[:-1] = span[1:] != span[:-1]
    following[last_step] = end
    del last_step
    whose = whose_span[span]
    del span, whose_span
    counted = np.flatnonzero(whose >= 0)
    names = ("after", "baseline", "pre")
    component_names = list(services)
    counted_pairs: Counter[tuple[str, str, str, str]] = Counter()
    for w, a, b, n in _runs(whose[counted], label[counted], following[counted], width=len(texts)):
        period_code, component_code = divmod(w, len(services))
        counted_pairs[(names[period_code], component_names[component_code], texts[a], texts[b])] = n
    return counted_pairs


#: The largest number an int64 holds, plus one.
INT64_END = 2**63


def _runs(
    whose: np.ndarray, step: np.ndarray, following: np.ndarray, *, width: int, packed_below: int = INT64_END
) -> list[tuple[int, int, int, int]]:
    """Each distinct ``(whose, step, following)`` in ascending order, with how many times it occurs;
    ``step`` and ``following`` are below ``width``, every value is >= 0.

    Packed as one number ``(whose * width + step) * width + following`` where the largest fits below
    ``packed_below`` (an int64: always, but for millions of distinct steps), sorted in place: one
    array of eight bytes an event. Else ordered by the three columns (a sort and a copy of each)."""
    if not len(whose):
        return []
    if (int(whose.max()) + 1) * width * width <= packed_below:
        key = whose.astype(np.int64)
        key *= width
        key += step
        key *= width
        key += following
        key.sort()
        starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
        counts = np.diff(starts, append=len(key))
        head, nxt = np.divmod(key[starts], width)
        w, a = np.divmod(head, width)
        columns: tuple[np.ndarray, ...] = (w, a, nxt)
    else:
        order = np.lexsort((following, step, whose))
        columns = (whose[order], step[order], following[order])
        changed = np.zeros(len(order), dtype=bool)
        changed[0] = True
        for column in columns:
            changed[1:] |= column[1:] != column[:-1]
        starts = np.flatnonzero(changed)
        counts = np.diff(starts, append=len(order))
        columns = tuple(c[starts] for c in columns)
    return list(zip(*(c.tolist() for c in columns), counts.tolist(), strict=True))


def _client_calls(spans: SpanColumns) -> dict[str, set[str]]:
    """Per component, its call steps that are client spans of a call to another component: a span of
    the component, under one of its own, whose child is served elsewhere (an instrumented client, as
    OpenTelemetry's gRPC and HTTP clients record each call). What follows such a step is the other
    component's answer, as for a call recorded by the callee's span alone."""
    ids = len(spans.span_ids)
    last = spans.last_of(spans.span_id, ids)  # a span id given twice is its last span's
    owner = np.full(ids, -1, dtype=np.int64)
    known = last >= 0
    owner[known] = spans.service[last[known]]
    child = np.flatnonzero(spans.parent_id >= 0)
    above = owner[spans.parent_id[child]]
    elsewhere = np.zeros(ids, dtype=bool)
    elsewhere[spans.parent_id[child][(above >= 0) & (above != spans.service[child])]] = True
    client = np.flatnonzero(elsewhere[spans.span_id] & (spans.parent_id >= 0))
    client = client[owner[spans.parent_id[client]] == spans.service[client]]
    out: dict[str, set[str]] = defaultdict(set)
    for service, operation in set(zip(spans.service[client].tolist(), spans.operation[client].tolist(), strict=True)):
        name = spans.services[service]
        out[name].add(f"calls {name} {spans.operations[operation]}")
    return out


def _calls_another(step: str, service: str) -> bool:
    """Whether the step is a call to another component: what follows it is that component's answer (an
    error it returned cuts the caller's request short), not the caller's code."""
    return step.startswith("calls ") and step.split(" ", 2)[1] != service


def fall_z(c1: int, n1: int, c2: int, n2: int) -> float:
    """How surely a share fell from ``c1/n1`` to ``c2/n2``, as a standard-normal z (0 where it did not):
    Fisher's exact test, one-sided (the probability of ``c2`` or fewer of the ``n2`` after onset, given
    both margins), its p-value read as the z it would be under a normal curve.

    The two-proportion z it replaces overstates a fall seen in a handful of requests (3 of 4 before
    onset and 0 of 34 after read z 5.3; the exact test says 3.3). Written here rather than taken from
    SciPy's ``hypergeom`` (40 us a call against 6 us): large systems test every step of every component."""
    k, n = c1 + c2, n1 + n2
    if n1 <= 0 or n2 <= 0 or c1 * n2 <= c2 * n1:
        return 0.0
    log_total = math.lgamma(n + 1) - math.lgamma(n2 + 1) - math.lgamma(n - n2 + 1)

    def log_p(x: int) -> float:  # P(X = x): x of the k followed steps fell after onset
        return (
            math.lgamma(k + 1)
            - math.lgamma(x + 1)
            - math.lgamma(k - x + 1)
            + math.lgamma(n - k + 1)
            - math.lgamma(n2 - x + 1)
            - math.lgamma(n - k - n2 + x + 1)
            - log_total
        )

    terms = [log_p(x) for x in range(max(0, k - n1), min(c2, k, n2) + 1)]
    if not terms:
        return 0.0
    top = max(terms)
    p = math.exp(top + math.log(sum(math.exp(t - top) for t in terms)))
    return max(-_NORMAL.inv_cdf(min(max(p, 1e-300), 0.5)), 0.0)


_NORMAL = NormalDist()


def _branched(
    step: str, lost: str, before: Counter[tuple[str, str]], n1: int, after: Counter[tuple[str, str]], n2: int
) -> float:
    """The share of the lost successor's place after onset taken by a branch: another successor the step
    already took (ESTABLISHED) that is neither the span's end nor what used to follow the lost step.

    A fault leaves the step followed by the end of the span (cut short), by something new (an error, a
    fallback) or by what came after the lost step (skipped). A change in which requests came leaves it
    followed more often by a path it already took now and then (``before`` and ``after``: the
    component's (step, next step) counts; ``n1`` and ``n2``: the step's counts)."""
    after_lost = Counter({b: c for (a, b), c in before.items() if a == lost})
    taken = sum(after_lost.values())
    skipped = {b for b, c in after_lost.items() if c / taken >= USUAL}
    gained = branch = 0.0
    for nxt in sorted({b for (a, b) in before if a == step} | {b for (a, b) in after if a == step}):
        rise = after[(step, nxt)] / n2 - before[(step, nxt)] / n1
        if nxt == lost or rise <= 0:
            continue
        gained += rise
        if nxt != END and nxt not in skipped and before[(step, nxt)] / n1 >= ESTABLISHED:
            branch += rise
    return branch / gained if gained > 0 else 0.0


def broken_share(s: StepShortfall) -> float:
    """The share of requests after onset that lost a fixed path's next step (less the part a branch
    took), or 0 where the step was no fixed path or is not broken in most requests."""
    return _broken(s.share_before, s.steps_before, s.share_after, s.steps_after, s.branched)


def _broken(before: float, n1: int, after: float, n2: int, branched: float) -> float:
    fixed = before >= FIXED_PATH and n1 >= FIXED_PATH_MIN
    lost = after <= BROKEN_SHARE and n2 >= BROKEN_MIN
    return (before - after) * (1.0 - branched) if fixed and lost else 0.0


def step_shortfalls(
    spans: Sequence[Span] | SpanColumns, lines: Iterable[StepLine], *, incident: Incident
) -> list[StepShortfall]:
    """Per component, the step whose expected successor went missing most clearly after onset, and,
    where it is another step, the fixed path broken in the most requests (:func:`broken_share`).

    Before onset is the incident's baseline where the step was taken often enough there, else the spans
    between the window's start and onset (as for call gaps); onset is the alert's start less its pending
    period (ALERT_LEAD_S). The measure is how surely the share of the step followed by its usual
    successor fell (:func:`fall_z`: Fisher's exact test read as a z), less the share of the lost successor's
    place that a branch the step already took has taken (:func:`_branched`). A component whose compared steps lost
    nothing gets a shortfall of 0 (it ran, and found none); one whose steps are always followed by the
    same next step, before and after, has nothing to compare and is not listed."""
    b0, b1 = unix(incident.baseline.start), unix(incident.baseline.end)
    w0, w1 = unix(incident.window.start), unix(incident.window.end)
    onset = max(unix(incident.onset) - ALERT_LEAD_S, w0)
    pairs: dict[str, dict[str, Counter[tuple[str, str]]]] = {
        p: defaultdict(Counter) for p in ("baseline", "pre", "after")
    }
    seen: dict[str, dict[str, Counter[str]]] = {p: defaultdict(Counter) for p in ("baseline", "pre", "after")}
    columns = spans if isinstance(spans, SpanColumns) else SpanColumns.read(spans)
    counted = _transitions(columns, StepLines.of(lines), onset=onset, window=(w0, w1), baseline=(b0, b1))
    client = _client_calls(columns)
    for (period, service, a, b), n in counted.items():
        pairs[period][service][(a, b)] += n
        seen[period][service][a] += n
    out: list[StepShortfall] = []
    for service in sorted(seen["after"]):
        after_seen, after_pairs = seen["after"][service], pairs["after"][service]
        best: StepShortfall | None = None
        path: StepShortfall | None = None
        path_share = 0.0  # broken_share(path)
        for step in sorted(after_seen):
            if _calls_another(step, service) or step in client.get(service, ()):
                continue
            period = "baseline" if seen["baseline"][service][step] >= MIN_STEPS else "pre"
            n1, n2 = seen[period][service][step], after_seen[step]
            if n1 < MIN_STEPS or n2 < MIN_STEPS:
                continue
            for (a, nxt), c1 in sorted(pairs[period][service].items()):
                # Only the step's usual successor can go missing, and the end of the span never does: a
                # fault that cuts requests short ends them sooner; a span no longer ending there does more.
                if a != step or nxt == END or c1 / n1 < USUAL or n2 * c1 / n1 < MIN_EXPECTED:
                    continue
                c2 = after_pairs[(step, nxt)]
                if c1 + c2 >= n1 + n2:  # followed every time before and after: nothing to compare
                    continue
                z = fall_z(c1, n1, c2, n2)
                branched = _branched(step, nxt, pairs[period][service], n1, after_pairs, n2)
                z *= 1.0 - branched
                share = _broken(round(c1 / n1, 4), n1, round(c2 / n2, 4), n2, round(branched, 4))
                better = best is None or z > best.z
                if not better and share <= path_share:
                    continue
                found = StepShortfall(
                    component=service,
                    step=step,
                    next_step=nxt,
                    reference="baseline" if period == "baseline" else "before onset",
                    steps_before=n1,
                    share_before=round(c1 / n1, 4),
                    steps_after=n2,
                    share_after=round(c2 / n2, 4),
                    z=round(max(z, 0.0), 3),
                    branched=round(branched, 4),
                )
                if better:
                    best = found
                if share > path_share:
                    path, path_share = found, share
        if best is not None:
            out.append(best)
        if path is not None and path is not best:
            out.append(path)  # the most broken fixed path, where the sharpest fall is another step
    return out
