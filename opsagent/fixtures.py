"""Recorded incidents: the on-disk format, its loader and its validator.

A fixture directory holds ``incident.yaml`` and optional raw telemetry files (``metrics``,
``logs``, ``changes``, ``traces``, ``kubernetes``; ``.jsonl`` or ``.jsonl.gz``). The loader returns the telemetry
and the visible part of ``incident.yaml`` as a :class:`Recording`, and ``truth`` separately as
:class:`Truth`: nothing a reasoner is handed can reach the truth. This module does no analysis.
"""

from __future__ import annotations

import gzip
import json
import operator
from array import array
from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from datetime import UTC, datetime
from functools import cache
from itertools import chain, compress, islice, repeat
from operator import itemgetter
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, get_args, overload

import numpy as np
import yaml
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    GetCoreSchemaHandler,
    PlainSerializer,
    SkipValidation,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import core_schema, from_json

from opsagent.analysis.columns import BATCH, SpanBatches, SpanColumns
from opsagent.errors import ConfigError, FixtureError, Problem
from opsagent.models import Alert, FaultKind, RolloutStep, TimeRange, possible
from opsagent.yamltext import load_yaml

TELEMETRY = ("metrics", "logs", "changes", "traces", "kubernetes")


class SignalDef(BaseModel):
    """One entry of a signal catalog: how a semantic signal is queried in an environment."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(description="PromQL (or replay selector) with $service standing for the component")
    unit: str | None = None
    direction: Literal["up", "down", "any"] = Field(
        default="up", description="which way is bad: a latency going up, a hit ratio going down"
    )
    agg: Literal["max", "sum", "mean"] = Field(
        default="max", description="how several matching series (pods) combine into one"
    )
    limit: str | None = Field(default=None, description="query for the ceiling of this signal")
    scope: Literal["service", "edge"] = "service"
    min_delta: float = Field(default=0.0, ge=0, description="smallest absolute change that matters")
    type: Literal["gauge", "counter"] | None = Field(
        default=None, description="read matching series without a type of their own as this type"
    )


class Edge(BaseModel):
    model_config = ConfigDict(extra="forbid")

    caller: str
    callee: str
    source: Literal["declared", "traces"] = "declared"


class Truth(BaseModel):
    """The ground truth. Used by scoring only; never shown to a reasoner."""

    model_config = ConfigDict(extra="allow")

    service: str
    kind: FaultKind
    summary: str
    change_ids: list[str] = Field(default_factory=list)
    expect: Literal["confirmed", "inconclusive"] | None = None
    component: str | None = Field(
        default=None,
        description="the broken component where it is not a service (a workload, a Service object, a node, "
        "a namespace); scoring accepts it, and ``service`` where it is absent",
    )
    object_type: Literal["app", "workload", "service", "node", "namespace"] | None = None
    joined: list[str] = Field(
        default_factory=list,
        description="an alert storm: the alertnames of the header's ``alerts`` that belong to this incident",
    )
    apart: list[str] = Field(
        default_factory=list,
        description="an alert storm: the alertnames of the header's ``alerts`` that are unrelated to it and must "
        "stay incidents of their own",
    )

    @property
    def target(self) -> str:
        """The component a suspect must name to be right."""
        return self.component or self.service


TelemetryName = Literal["metrics", "logs", "changes", "traces", "kubernetes"]


class Tags(BaseModel):
    """What a recorded incident is, for choosing slices of the corpus (``replay --tag``,
    benchmarks): like ``truth``, read by selection and scoring only, never shown to a reasoner."""

    model_config = ConfigDict(extra="forbid")

    fault: FaultKind | None = Field(default=None, description="the kind of fault (the taxonomy's; truth.kind)")
    sources: list[TelemetryName] = Field(
        default_factory=list, description="the telemetry files the recording has, sorted"
    )
    system: str | None = Field(default=None, description="the system the incident happened in, e.g. e-commerce")

    def matches(self, wanted: dict[str, str]) -> bool:
        """Whether every ``key=value`` asked holds: ``sources`` holds the value, the others equal it."""
        for key, value in wanted.items():
            if key == "sources":
                if value not in self.sources:
                    return False
            elif getattr(self, key) != value:
                return False
        return True


#: The keys ``--tag KEY=VALUE`` takes.
TAG_KEYS = tuple(Tags.model_fields)


def tag_filter(pairs: list[str]) -> dict[str, str]:
    """``["fault=config_change", "sources=traces"]`` as a mapping; a bad pair is a :class:`ConfigError`."""
    wanted: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not value or key not in TAG_KEYS:
            raise ConfigError(f"--tag {pair!r}: expected KEY=VALUE, KEY one of {', '.join(TAG_KEYS)}")
        wanted[key] = value
    return wanted


class IncidentFile(BaseModel):
    """``incident.yaml`` as written on disk."""

    model_config = ConfigDict(extra="forbid")

    alert: Alert
    alerts: list[Alert] = Field(
        default_factory=list,
        description="other alerts that fired around it (an alert storm): correlation decides which join the incident",
    )
    window: TimeRange
    baseline: TimeRange | None = None
    topology: list[Edge] = Field(default_factory=list)
    signals: dict[str, SignalDef] = Field(default_factory=dict)
    meta: str | None = None
    tags: Tags | None = None
    truth: Truth | None = None

    @field_validator("window", "baseline")
    @classmethod
    def _possible_period(cls, period: TimeRange | None) -> TimeRange | None:
        if period is not None:
            possible(period.start)
            possible(period.end)
        return period


class Samples(Sequence[tuple[float, float]]):
    """A series' samples, ``(unix_s, value)`` pairs in the order given, held as one float64 array of
    two columns: 16 bytes a sample, where a tuple of two floats a sample takes 112 (a recording's
    samples were the largest part of its metrics in memory). A sequence of those tuples to every
    reader, made as it is read; equal to a sequence of the same pairs. Immutable, as the series is."""

    __slots__ = ("_pairs",)

    def __init__(self, pairs: Iterable[tuple[float, float]] = ()) -> None:
        listed = pairs if isinstance(pairs, list) else list(pairs)
        array = np.fromiter(chain.from_iterable(listed), dtype=np.float64, count=2 * len(listed)).reshape(-1, 2)
        array.flags.writeable = False
        self._pairs = array

    @classmethod
    def _holding(cls, array: np.ndarray) -> Samples:
        """Samples holding ``array`` (float64, two columns) as it is, made read-only."""
        out = cls.__new__(cls)
        array.flags.writeable = False
        out._pairs = array
        return out

    @classmethod
    def of_columns(cls, times: np.ndarray, values: np.ndarray) -> Samples:
        """Samples from a column of times and one of values, of one length (copied)."""
        return cls._holding(np.column_stack((times, values)).astype(np.float64, copy=False).reshape(-1, 2))

    @property
    def times(self) -> np.ndarray:
        """The samples' times (unix s), a read-only view."""
        return self._pairs[:, 0]

    @property
    def values(self) -> np.ndarray:
        """The samples' values, a read-only view."""
        return self._pairs[:, 1]

    def pairs(self) -> list[tuple[float, float]]:
        """The samples as a list of ``(unix_s, value)`` tuples."""
        return list(self)

    def __iter__(self) -> Iterator[tuple[float, float]]:
        flat = iter(self._pairs.ravel().tolist())  # floats made at once in C, paired by zip
        return zip(flat, flat, strict=False)

    def __len__(self) -> int:
        return len(self._pairs)

    @overload
    def __getitem__(self, index: int) -> tuple[float, float]: ...

    @overload
    def __getitem__(self, index: slice) -> Samples: ...

    def __getitem__(self, index: int | slice) -> tuple[float, float] | Samples:
        if isinstance(index, slice):
            return Samples._holding(self._pairs[index])
        t, v = self._pairs[index].tolist()
        return (t, v)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Samples):
            return bool(np.array_equal(self._pairs, other._pairs))
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return self.pairs() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # as the list of pairs it stands for

    def __repr__(self) -> str:
        return f"Samples({self.pairs()!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Samples, (self.pairs(),))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        # Validated as the list of pairs of finite floats it was before (the same errors, fields and
        # JSON schema), then held as an array; samples already held pass as they are.
        pairs = handler.generate_schema(list[tuple[FiniteFloat, FiniteFloat]])
        from_pairs = core_schema.no_info_after_validator_function(cls, pairs)
        return core_schema.json_or_python_schema(
            json_schema=from_pairs,
            python_schema=core_schema.no_info_wrap_validator_function(_held_or_validated, pairs),
            serialization=core_schema.plain_serializer_function_ser_schema(cls.pairs, return_schema=pairs),
        )


def _held_or_validated(value: Any, handler: core_schema.ValidatorFunctionWrapHandler) -> Samples:
    return value if isinstance(value, Samples) else Samples(handler(value))


class MetricSeries(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    labels: dict[str, str]
    #: [unix_s, value]; no NaN or infinity (a missing sample is left out)
    samples: Samples
    unit: str | None = None
    type: Literal["gauge", "counter"] | None = None

    @field_validator("labels")
    @classmethod
    def _has_name(cls, labels: dict[str, str]) -> dict[str, str]:
        if "__name__" not in labels:
            raise ValueError("labels must include __name__")
        return labels

    @property
    def name(self) -> str:
        return self.labels["__name__"]


class LogRecord(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    ts: AwareDatetime
    service: str
    level: str
    message: str
    trace_id: str | None = None
    pod: str | None = None


class RecordedLine(NamedTuple):
    """One log line as a loaded recording holds it: a :class:`LogRecord`'s fields, read the same way
    (``ts``, ``service``, ``level``, ``message``, ``trace_id``, ``pod``, ``model_extra``,
    ``model_fields_set``), in a tuple of 104 bytes where the model and its dict of fields took 352 (a
    large recording holds hundreds of thousands of lines). Validated as a :class:`LogRecord` when read
    (:meth:`of`); immutable; :meth:`record` gives that record back."""

    ts: datetime
    service: str
    level: str
    message: str
    trace_id: str | None
    pod: str | None
    #: fields beyond a log record's own, as read (None where the line has none)
    model_extra: dict[str, Any] | None
    #: the fields the line gave (shared by lines that gave the same ones)
    model_fields_set: AbstractSet[str]

    @classmethod
    def of(cls, record: LogRecord) -> RecordedLine:
        """The line a validated record holds."""
        own = _own_fields(record.__dict__)
        return _new_tuple(cls, (*own, record.__pydantic_extra__ or None, record.__pydantic_fields_set__))

    def record(self) -> LogRecord:
        """The line as the :class:`LogRecord` it was read as."""
        fields: dict[str, Any] = dict(zip(_LOG_FIELDS, self, strict=False))
        record = LogRecord.model_construct(set(self.model_fields_set), **fields)
        # its extra fields as read, not as keywords: a line may name one ``_fields_set``
        object.__setattr__(record, "__pydantic_extra__", dict(self.model_extra or {}))
        return record


_new_tuple = tuple.__new__
#: A log record's own fields: the first of :class:`RecordedLine`'s, in this order.
_LOG_FIELDS = RecordedLine._fields[:6]
_own_fields = itemgetter(*_LOG_FIELDS)


def _recorded_lines(lines: list[RecordedLine]) -> list[LogRecord]:
    return [line.record() for line in lines]


class Change(BaseModel):
    """One change as a feed or a recording holds it. A rollout may carry its steps and the pods of
    each version; a record whose times contradict each other is malformed (the field is named)."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    ts: AwareDatetime
    end: AwareDatetime | None = Field(default=None, description="when a rollout finished; none while in progress")
    service: str
    kind: Literal["deploy", "rollout", "config", "flag", "infra", "scale"]
    summary: str
    from_version: str | None = None
    to_version: str | None = None
    author: str | None = None
    diff: str | None = None
    url: str | None = Field(default=None, description="where the change can be read: a commit or deploy page")
    steps: list[RolloutStep] = Field(default_factory=list, description="a rollout's steps, in time order")
    pods: dict[str, list[str]] = Field(default_factory=dict, description="version -> the pods running it")

    @field_validator("end")
    @classmethod
    def _ends_after_it_starts(cls, end: datetime | None, info: ValidationInfo) -> datetime | None:
        start = info.data.get("ts")
        if end is not None and start is not None and end < start:
            raise ValueError(f"the change ends ({end.isoformat()}) before it starts ({start.isoformat()})")
        return end

    @field_validator("steps")
    @classmethod
    def _steps_in_its_time(cls, steps: list[RolloutStep], info: ValidationInfo) -> list[RolloutStep]:
        start, end = info.data.get("ts"), info.data.get("end")
        previous: RolloutStep | None = None
        for n, step in enumerate(steps, start=1):
            if start is not None and step.ts < start:
                raise ValueError(f"step {n} ({step.ts.isoformat()}) is before the change starts ({start.isoformat()})")
            if end is not None and step.ts > end:
                raise ValueError(f"step {n} ({step.ts.isoformat()}) is after the change ends ({end.isoformat()})")
            if previous is not None and step.ts < previous.ts:
                raise ValueError(f"step {n} ({step.ts.isoformat()}) is before step {n - 1}: steps go in time order")
            previous = step
        return steps


class Span(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    trace_id: str
    span_id: str
    parent_id: str | None
    service: str
    operation: str
    start: datetime | int = Field(description="RFC3339, or unix nanoseconds")
    duration_us: float = Field(ge=0, allow_inf_nan=False)
    status: Literal["ok", "error", "unset"] = "unset"

    @field_validator("start", mode="after")
    @classmethod
    def _aware(cls, v: datetime | int) -> datetime | int:
        if isinstance(v, datetime) and v.tzinfo is None:
            raise ValueError("timestamp must carry a timezone (use Z for UTC)")
        return v

    @property
    def start_s(self) -> float:
        if isinstance(self.start, int):
            return self.start / 1e9
        return self.start.timestamp()


#: The Kubernetes kinds a recording (and the live reader) holds.
KubeKind = Literal[
    "Pod", "Event", "Node", "Deployment", "ReplicaSet", "Rollout", "StatefulSet", "DaemonSet", "Service", "Endpoints"
]
KUBE_KINDS: tuple[KubeKind, ...] = get_args(KubeKind)


class OwnerReference(BaseModel):
    model_config = ConfigDict(extra="allow")

    kind: str
    name: str


class KubeMeta(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_references: list[OwnerReference] = Field(default_factory=list, alias="ownerReferences")
    creation_timestamp: AwareDatetime | None = Field(default=None, alias="creationTimestamp")


class KubeObject(BaseModel):
    """One Kubernetes object exactly as the API serves it (``apiVersion``, ``kind``, ``metadata``,
    ``spec``, ``status``, and an Event's own top-level fields). The engine reads what it needs of it
    (:mod:`opsagent.kubestate`); everything else is kept as it came."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    api_version: str = Field(alias="apiVersion")
    kind: KubeKind
    metadata: KubeMeta
    spec: dict[str, Any] = Field(default_factory=dict)
    status: dict[str, Any] = Field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or ""

    def raw(self) -> dict[str, Any]:
        """The object as the API wrote it (for recordings)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


_RECORD_MODELS: dict[str, type[BaseModel]] = {
    "metrics": MetricSeries,
    "logs": LogRecord,
    "changes": Change,
    "traces": Span,
    "kubernetes": KubeObject,
}


class Recording(BaseModel):
    """A recorded incident as a reasoner may see it: telemetry and the visible header. No truth."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    slug: str
    alert: Alert
    alerts: list[Alert] = Field(default_factory=list, description="other alerts that fired around it")
    window: TimeRange
    baseline: TimeRange | None
    topology: list[Edge]
    signals: dict[str, SignalDef]
    meta: str | None
    metrics: list[MetricSeries]
    logs: Annotated[
        list[RecordedLine], SkipValidation, PlainSerializer(_recorded_lines, return_type=list[LogRecord])
    ] = Field(description="the log lines, each read as a log record and held as a :class:`RecordedLine`")
    changes: list[Change]
    traces: Annotated[SpanColumns, PlainSerializer(SpanColumns.as_json, return_type=dict[str, Any])] = Field(
        description="the spans as columns: what every trace analysis reads"
    )
    kubernetes: list[KubeObject] = Field(default_factory=list, description="Kubernetes objects as recorded")
    present: frozenset[str] = Field(description="which telemetry files the recording has")


def _open_lines(path: Path) -> Iterator[bytes]:
    """Lines as bytes: each is decoded on its own, so a line that is not UTF-8 is named by number."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        yield from fh


def _open_batches(path: Path) -> Iterator[list[bytes]]:
    """Lines as bytes (see :func:`_open_lines`), BATCH at a time, read from the file in C."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        while batch := list(islice(fh, BATCH)):
            yield batch


def telemetry_file(directory: Path, name: str) -> Path | None:
    for candidate in (directory / f"{name}.jsonl", directory / f"{name}.jsonl.gz"):
        if candidate.exists():
            return candidate
    return None


def _field_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(record)"


def not_utf8(exc: UnicodeDecodeError) -> str:
    """What to say of text that is not UTF-8."""
    return f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}): save it as UTF-8"


#: Files whose records must not share a value of this field: a change is named by its id.
_UNIQUE: dict[str, str] = {"changes": "id"}


def _read_records(path: Path, model: type[BaseModel], problems: list[Problem], unique: str | None = None) -> list[Any]:
    return list(_records(path, model, problems, unique, share_extras=True))


def _read_logs(path: Path, problems: list[Problem]) -> list[RecordedLine]:
    """A logs file as the lines a recording holds, each as the :class:`LogRecord` it validates as would
    give it (with the same problems as :func:`stream`), kept as a :class:`RecordedLine`.

    Validating a line as a model, then keeping its fields as a tuple, cost three times what parsing its
    JSON does. So each line is parsed, and a batch of parsed lines whose every field has the plain form
    (a JSON object; a time, service, level and message given as texts; a trace id and pod as texts or
    null) is checked a field at a time, its times validated as one list, and kept as read; a batch
    holding any other line (a time as a number, a bad line) is validated a line at a time."""
    shared = _Shared(extras=True)
    out: list[RecordedLine] = []
    for first, raws, records in _parsed_batches(path, problems):
        plain = _plain_lines(records, shared) if records is not None else None
        if plain is None:
            numbered = _text_lines(path, raws, first, problems)
            plain = list(map(RecordedLine.of, _validated(path, LogRecord, numbered, problems, None, shared)))
        out.extend(plain)
    return out


def _parsed_batches(path: Path, problems: list[Problem]) -> Iterator[tuple[int, list[bytes], list[Any] | None]]:
    """Each batch of a JSON-lines file (see :func:`_open_batches`): its first line's number, its lines as
    read, and each parsed as JSON (None when one is not: the caller takes that batch a line at a time,
    to name it). A file that cannot be read is a problem, and what was read before stays read."""
    first = 1
    try:
        for raws in _open_batches(path):
            try:  # bytes as read: JSON is UTF-8, and a line that is not fails here, to be named by the caller
                records: list[Any] | None = [from_json(raw, cache_strings=True) for raw in raws]
            except ValueError:
                records = None
            yield first, raws, records
            first += len(raws)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        problems.append(Problem(str(path), f"cannot read: {exc}"))


#: A log record's fields given as texts: in the plain form, every line gives them (its time too).
_LOG_TEXTS = ("ts", "service", "level", "message")
#: A log record's fields that may be given as a text, as null or not at all.
_LOG_OPTIONAL = ("trace_id", "pod")


@cache
def _times() -> TypeAdapter[list[datetime]]:
    """Log records' times, validated a list at a time as :attr:`LogRecord.ts` is (the same type: the same
    times, refused alike)."""
    return TypeAdapter(list[AwareDatetime])


def _plain_lines(records: list[Any], shared: _Shared) -> list[RecordedLine] | None:
    """A batch of parsed lines as the lines a recording holds, if every record is a JSON object whose
    log fields have the plain form (see :func:`_read_logs`); else None. Checked a field at a time over
    the batch, in loops that run in C, but for a record's extra fields."""
    if not records or set(map(type, records)) != {dict}:
        return None
    fields = {name: list(map(dict.get, records, repeat(name))) for name in _LOG_FIELDS}
    if any(set(map(type, fields[name])) != {str} for name in _LOG_TEXTS):
        return None
    if any(not set(map(type, fields[name])) <= {str, type(None)} for name in _LOG_OPTIONAL):
        return None
    try:
        times = _times().validate_python(fields["ts"])
    except ValidationError:
        return None
    layouts = list(map(tuple, records))  # each line's keys, in order: a batch has one or a few
    kinds = {layout: shared.layout(layout) for layout in dict.fromkeys(layouts)}
    given = [kinds[layout][0] for layout in layouts]
    extras: list[dict[str, Any] | None] = [None] * len(records)
    for layout, (_, names) in kinds.items():
        if names and len(kinds) == 1:
            extras[:] = shared.extras_of(names, records)
        elif names:
            at = [i for i, keys in enumerate(layouts) if keys == layout]
            for i, extra in zip(at, shared.extras_of(names, [records[i] for i in at]), strict=True):
                extras[i] = extra
    own = (fields[name] for name in _LOG_FIELDS[1:])
    return list(map(_new_tuple, repeat(RecordedLine), zip(times, *own, extras, given, strict=True)))


def read_spans(path: Path) -> SpanColumns:
    """A traces file read straight into columns, as :func:`load` reads a recording's: a few numbers a
    span and its ids, never a record a span. Raises :class:`FixtureError` naming every bad line."""
    problems: list[Problem] = []
    columns = _read_spans(path, problems)
    if problems:
        raise FixtureError(problems)
    return columns


def _read_spans(path: Path, problems: list[Problem]) -> SpanColumns:
    """A traces file straight into columns: each line is parsed as JSON, and a batch of lines whose
    every field has the plain form (texts, a start in unix ns, a finite duration of at least zero, a
    known status) goes into the columns as read; any other line is validated as a :class:`Span`, so
    it is coerced or refused, with the same problems, exactly as :func:`stream` would. Fields beyond
    a span's own (pod, attributes) are validated, not kept: no trace analysis reads them, and
    :func:`stream` yields whole spans where they are wanted."""
    batches = SpanBatches()
    for first, raws, records in _parsed_batches(path, problems):
        fields = _plain_fields(records) if records is not None else None
        if fields is None:
            fields = _span_fields(_span_records(path, first, raws, problems))
        batches.add(**fields)
    return batches.columns()


#: A span's fields as a batch of them is handed to the columns.
_SPAN_FIELDS = ("trace_id", "span_id", "parent_id", "service", "operation", "start", "duration_us", "status")
#: The span fields that are texts.
_TEXTS = ("trace_id", "span_id", "service", "operation")
#: A span's status as the format names it; a line without one is "unset".
_STATUSES = {"ok", "error", "unset"}
#: Unix ns fit in int64 (the start column's type); past it a start goes the way of an odd one.
_NS_LIMIT = 2**63
#: Integers up to this are floats exactly, so a duration given as one needs no rounding.
_EXACT_INT = 2**53


def _plain_fields(records: list[Any]) -> dict[str, list[Any]] | None:
    """The span fields of a batch of parsed lines, one list a field, if every record is a JSON object
    whose span fields have the plain form, the one :class:`Span` takes as it is; else None. Checked a
    field at a time over the batch, in loops that run in C (``map``, ``set``, ``min``, numpy)."""
    if not records or set(map(type, records)) != {dict}:
        return None
    fields: dict[str, list[Any]] = {name: list(map(dict.get, records, repeat(name))) for name in _SPAN_FIELDS}
    if any(set(map(type, fields[name])) != {str} for name in _TEXTS):
        return None
    parents = set(map(type, fields["parent_id"]))
    if not parents <= {str, type(None)}:
        return None
    if type(None) in parents and not all(map(dict.__contains__, records, repeat("parent_id"))):
        return None  # a parent id must be given, if only as null
    start = fields["start"]
    if set(map(type, start)) != {int} or min(start) < -_NS_LIMIT or max(start) >= _NS_LIMIT:
        return None
    if not set(map(type, fields["duration_us"])) <= {int, float}:
        return None
    try:
        duration = np.frombuffer(array("d", fields["duration_us"]), dtype=np.float64)
    except OverflowError:  # an integer past any float
        return None
    if not (np.isfinite(duration).all() and (duration >= 0.0).all() and (duration <= _EXACT_INT).all()):
        return None
    status = list(map(dict.get, records, repeat("status"), repeat("unset")))
    if set(map(type, status)) != {str} or not set(status) <= _STATUSES:
        return None
    fields["error"] = list(map("error".__eq__, status))
    del fields["status"]
    return fields


def _span_fields(records: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The span fields of records already plain or validated, one list a field."""
    fields = {name: [r[name] for r in records] for name in _SPAN_FIELDS if name != "status"}
    fields["error"] = [r.get("status") == "error" for r in records]
    return fields


def _text_lines(
    path: Path, raws: Iterable[bytes], first: int, problems: list[Problem]
) -> Iterator[tuple[int, bytes, str]]:
    """Each line with its number (from ``first``), as read and as text; blank lines skipped, a line that
    is not UTF-8 named in ``problems``."""
    for lineno, raw in enumerate(raws, start=first):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(Problem(str(path), not_utf8(exc), line=lineno))
            continue
        if line and not line.isspace():
            yield lineno, raw, line


def _invalid(path: Path, exc: ValidationError, lineno: int) -> list[Problem]:
    """A line's validation errors as problems, each with the field it names."""
    return [
        Problem(
            str(path), err["msg"], line=lineno, field=_field_path(tuple(p for p in err["loc"] if p != "json_invalid"))
        )
        for err in exc.errors()
    ]


def _span_records(path: Path, first: int, raws: list[bytes], problems: list[Problem]) -> list[dict[str, Any]]:
    """A batch that is not all plain, a line at a time: blank lines skipped, a plain line as read, any
    other validated as a span (its start in unix seconds where it was a time), or its problems named."""
    out = []
    for lineno, raw, line in _text_lines(path, raws, first, problems):
        try:
            record = from_json(raw, cache_strings=True)
        except ValueError:
            record = None
        if _plain_fields([record]) is not None:
            out.append(record)
            continue
        try:
            span = Span.__pydantic_validator__.validate_json(line)
        except ValidationError as exc:
            problems.extend(_invalid(path, exc, lineno))
            continue
        fields = dict(span.__dict__)
        fields["start"] = span.start if type(span.start) is int else span.start_s
        out.append(fields)
    return out


def stream(path: Path, name: TelemetryName) -> Iterator[Any]:
    """The records of one telemetry file (``name``: which kind it holds), each validated as its line is
    read: a file of any size is read in the memory of one line and what the caller keeps. The first
    line that is not a valid record raises :class:`FixtureError` naming file, line and field."""
    problems: list[Problem] = []
    for record in _records(path, _RECORD_MODELS[name], problems, _UNIQUE.get(name)):
        if problems:
            raise FixtureError(problems)
        yield record
    if problems:
        raise FixtureError(problems)


def _records(
    path: Path, model: type[BaseModel], problems: list[Problem], unique: str | None, *, share_extras: bool = False
) -> Iterator[Any]:
    """Each valid record of the file as its line is read; each invalid line's problems to ``problems``.
    ``share_extras``: for records the caller keeps (a stream keeps none, and holds no table for them)."""
    try:
        yield from _validated(
            path,
            model,
            _text_lines(path, _open_lines(path), 1, problems),
            problems,
            unique,
            _Shared(extras=share_extras) if model.model_config.get("frozen") else None,
        )
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        problems.append(Problem(str(path), f"cannot read: {exc}"))


def _validated(
    path: Path,
    model: type[BaseModel],
    lines: Iterable[tuple[int, bytes, str]],
    problems: list[Problem],
    unique: str | None,
    shared: _Shared | None,
) -> Iterator[Any]:
    """Each of ``lines`` (numbered, as read and as text) validated as a ``model`` record; each invalid
    line's problems to ``problems``. ``shared``: for records of a frozen model the caller keeps."""
    first_line: dict[Any, int] = {}
    validate_json = model.__pydantic_validator__.validate_json  # model_validate_json without its wrapper
    for lineno, _, line in lines:
        try:
            record = validate_json(line)
        except ValidationError as exc:
            problems.extend(_invalid(path, exc, lineno))
            continue
        key = getattr(record, unique) if unique else None
        if key is not None and key in first_line:
            again = f"duplicate {unique} {key!r} (also on line {first_line[key]})"
            problems.append(Problem(str(path), again, line=lineno, field=unique))
            continue
        if key is not None:
            first_line[key] = lineno
        if shared is not None:
            object.__setattr__(record, "__pydantic_fields_set__", shared.given(record.__pydantic_fields_set__))
            extra = record.__pydantic_extra__
            if extra:
                object.__setattr__(record, "__pydantic_extra__", shared.extra(extra))
        yield record


class _Shared:
    """What the records a caller keeps share when equal.

    pydantic gives every instance a set of the fields it was given (about 700 bytes, half of a span's
    memory); records of a frozen model never change it, so those that set the same fields share one
    set. Likewise the dict of fields beyond the model's own (184 bytes even for one field): a log
    line's pod or span id is one of a few, so records whose extra fields hold the same texts share
    one dict (``extras``; a stream keeps no records, and holds no table for them)."""

    def __init__(self, *, extras: bool) -> None:
        self._given: dict[frozenset[str], set[str]] = {}
        # the field names of extra fields -> their values (the value alone for one field: no tuple a
        # record to look it up) -> the dict shared; None where extra fields are kept as read
        self._extras: dict[tuple[str, ...], dict[Any, dict[str, Any]]] | None = {} if extras else None
        self._held = 0  # how many dicts the table holds
        # a parsed log line's keys, in order -> the set of fields it gave, shared, and its extra fields' names
        self._layouts: dict[tuple[str, ...], tuple[set[str], tuple[str, ...]]] = {}

    def given(self, fields: set[str]) -> set[str]:
        """The set of given fields shared by records that gave ``fields``."""
        return self._given.setdefault(frozenset(fields), fields)

    def layout(self, keys: tuple[str, ...]) -> tuple[set[str], tuple[str, ...]]:
        """A log line given ``keys`` (in order): the set of fields it gave, shared, and the names of its
        extra fields."""
        known = self._layouts.get(keys)
        if known is None:
            extra = tuple(k for k in keys if k not in _LOG_FIELDS)
            known = self._layouts[keys] = (self.given(set(keys)), extra)
        return known

    def extras_of(self, names: tuple[str, ...], records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The extra fields ``names`` of parsed records that have only those, each as :meth:`extra`
        would give it; one text or null field (a line's span id) is looked up a batch at a time."""
        table = self._extras.setdefault(names, {}) if self._extras is not None else None
        if table is not None and len(names) == 1:
            name = names[0]
            values = list(map(dict.__getitem__, records, repeat(name)))
            if set(map(type, values)) <= {str, type(None)}:
                found: list[dict[str, Any] | None] = list(map(table.get, values))
                missing = list(dict.fromkeys(compress(values, map(operator.is_, found, repeat(None)))))
                if missing:  # each new value's dict made once, while the table has room
                    held = missing[: max(MAX_SHARED_EXTRAS - self._held, 0)]
                    table.update(zip(held, [{name: value} for value in held], strict=True))
                    self._held += len(held)
                    found = list(map(table.get, values))
                    for i in compress(range(len(found)), map(operator.is_, found, repeat(None))):
                        found[i] = {name: values[i]}  # past the table's room: kept as read
                return found  # type: ignore[return-value]  # every one found or made
        return [self.extra({name: record[name] for name in names}) for record in records]

    def extra(self, extra: dict[str, Any]) -> dict[str, Any]:
        """The dict of extra fields shared by records whose extra fields hold the same texts as
        ``extra`` (``extra`` itself where none did before, or where it holds other values)."""
        if self._extras is None:
            return extra
        table = self._extras.get(tuple(extra))
        if table is None:
            table = self._extras[tuple(extra)] = {}
        values = tuple(extra.values())
        key = values[0] if len(values) == 1 else values
        try:
            same = table.get(key)
        except TypeError:  # a list or an object among them: kept as read
            return extra
        if same is not None:  # equal to texts and nulls only, so the same values
            return same
        if self._held < MAX_SHARED_EXTRAS and _texts(extra):
            table[key] = extra
            self._held += 1
        return extra


#: How many different extra-field dicts one file's records share at most: past it, a new one is kept
#: as read (ids in extra fields, such as a log line's span id, would otherwise fill the table).
MAX_SHARED_EXTRAS = 65_536


def _texts(extra: dict[str, Any]) -> bool:
    """Whether a record's extra fields are all texts or nulls: only those are shared, as ``1``, ``1.0``
    and ``true`` are equal in Python but not in JSON."""
    return all(v is None or type(v) is str for v in extra.values())


def _read_header(path: Path, problems: list[Problem]) -> IncidentFile | None:
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"))
    except OSError as exc:
        problems.append(Problem(str(path), f"cannot read: {exc}"))
        return None
    except UnicodeDecodeError as exc:
        problems.append(Problem(str(path), not_utf8(exc)))
        return None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problems.append(Problem(str(path), f"not valid YAML: {exc}", line=line))
        return None
    if not isinstance(raw, dict):
        problems.append(Problem(str(path), "must be a mapping with alert, window, truth…"))
        return None
    try:
        return IncidentFile.model_validate(raw)
    except ValidationError as exc:
        for err in exc.errors():
            problems.append(Problem(str(path), err["msg"], field=_field_path(err["loc"])))
        return None


def validate(directory: Path) -> list[Problem]:
    """Every problem of a fixture directory, with file, line and field. Empty when valid."""
    return _load(directory)[2]


def load(directory: Path) -> tuple[Recording, Truth | None]:
    """Load a fixture; raise :class:`FixtureError` naming every problem found."""
    recording, truth, problems = _load(directory)
    if problems or recording is None:
        raise FixtureError(problems or [Problem(str(directory), "not a recorded incident")])
    return recording, truth


def _load(directory: Path) -> tuple[Recording | None, Truth | None, list[Problem]]:
    problems: list[Problem] = []
    header_path = directory / "incident.yaml"
    if not directory.is_dir():
        return None, None, [Problem(str(directory), "not a directory")]
    if not header_path.exists():
        return None, None, [Problem(str(header_path), "missing: every recorded incident needs one")]
    header = _read_header(header_path, problems)
    telemetry: dict[str, Any] = {}
    present: set[str] = set()
    for name in TELEMETRY:
        path = telemetry_file(directory, name)
        if name == "traces":
            telemetry[name] = SpanColumns.read([]) if path is None else _read_spans(path, problems)
        elif name == "logs":
            telemetry[name] = [] if path is None else _read_logs(path, problems)
        else:
            telemetry[name] = (
                [] if path is None else _read_records(path, _RECORD_MODELS[name], problems, _UNIQUE.get(name))
            )
        if path is not None:
            present.add(name)
    if header is not None and header.tags is not None:
        problems.extend(_tag_problems(header_path, header.tags, header.truth, present))
    if header is None or problems:
        return None, None, problems
    recording = Recording(
        slug=directory.name,
        alert=header.alert,
        alerts=header.alerts,
        window=header.window,
        baseline=header.baseline,
        topology=header.topology,
        signals=header.signals,
        meta=header.meta,
        present=frozenset(present),
        **telemetry,
    )
    return recording, header.truth, problems


def _tag_problems(path: Path, tags: Tags, truth: Truth | None, present: set[str]) -> list[Problem]:
    """Tags that say something the recording does not: a selection by tag must not lie."""
    out = []
    if tags.sources and tags.sources != sorted(present):
        out.append(Problem(str(path), f"says {tags.sources} but the files are {sorted(present)}", field="tags.sources"))
    if tags.fault is not None and truth is not None and tags.fault != truth.kind:
        out.append(Problem(str(path), f"{tags.fault} but truth.kind is {truth.kind}", field="tags.fault"))
    return out


def read_header(directory: Path) -> IncidentFile:
    """A recorded incident's header (``incident.yaml``) alone, without its telemetry; raise
    :class:`FixtureError` naming every problem of it."""
    problems: list[Problem] = []
    header = _read_header(directory / "incident.yaml", problems)
    if header is None:
        raise FixtureError(problems or [Problem(str(directory), "not a recorded incident")])
    return header


def read_tags(directory: Path) -> Tags | None:
    """A recorded incident's tags, read from its header alone (selection need not load telemetry);
    None when it has none or its header cannot be read (loading it names the problem)."""
    header = _read_header(directory / "incident.yaml", [])
    return header.tags if header is not None else None


def json_schemas() -> dict[str, dict[str, Any]]:
    """JSON Schemas of every file of the format, generated from the models above."""
    schemas = {"incident.yaml": IncidentFile.model_json_schema(by_alias=True)}
    for name, model in _RECORD_MODELS.items():
        schemas[f"{name}.jsonl"] = model.model_json_schema()
    return schemas


def write_json_schemas(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in json_schemas().items():
        path = directory / f"{name.split('.')[0]}.schema.json"
        path.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        written.append(path)
    return written


def unix(ts: datetime) -> float:
    return (ts if ts.tzinfo else ts.replace(tzinfo=UTC)).timestamp()
