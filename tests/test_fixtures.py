import asyncio
import gzip
import json
import math
import pickle
import shutil
import tracemalloc
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

from opsagent.analysis.columns import SpanColumns
from opsagent.errors import FixtureError
from opsagent.fixtures import (
    MetricSeries,
    RecordedLine,
    Recording,
    json_schemas,
    load,
    read_spans,
    stream,
    validate,
)
from opsagent.models import Hypothesis, HypothesisResult, Incident, Lesson, Observation, Step
from opsagent.pipeline import investigate_fixture
from opsagent.plan import load_default_playbooks
from opsagent.reasoner import Decision, PlaybookReasoner
from opsagent.scoreboard import in_time_order
from opsagent.triage import Triage
from tests.conftest import INCIDENTS, ORDER_INCIDENT, ROOT

HEADER = {
    "alert": {"labels": {"alertname": "HighLatency", "service": "api"}, "startsAt": "2026-03-01T14:05:00Z"},
    "window": {"start": "2026-03-01T13:00:00Z", "end": "2026-03-01T14:30:00Z"},
    "truth": {"service": "db", "kind": "slow_query", "summary": "index dropped"},
}


def _fixture(tmp_path: Path, header: dict[str, Any] | None = None, **files: str) -> Path:
    d = tmp_path / "inc"
    d.mkdir()
    (d / "incident.yaml").write_text(yaml.safe_dump(header or HEADER))
    for name, text in files.items():
        (d / name.replace("_", ".")).write_text(text)
    return d


def test_every_shipped_incident_is_valid() -> None:
    dirs = sorted(p for p in INCIDENTS.iterdir() if p.is_dir())
    assert len(dirs) >= 12
    for d in dirs:
        assert validate(d) == [], d


def test_errors_name_file_line_and_field(tmp_path: Path) -> None:
    good = json.dumps({"ts": "2026-03-01T14:00:00Z", "service": "api", "level": "INFO", "message": "ok"})
    bad = json.dumps({"ts": "yesterday", "service": "api", "level": "INFO", "message": "ok"})
    d = _fixture(tmp_path, logs_jsonl=f"{good}\n{good}\n{bad}\n", changes_jsonl='{"id": "c1"\n')
    problems = validate(d)
    rendered = [str(p) for p in problems]
    assert any("logs.jsonl:3 [ts]" in r for r in rendered), rendered
    assert any("changes.jsonl:1" in r for r in rendered), rendered
    with pytest.raises(FixtureError) as exc:
        load(d)
    assert "logs.jsonl:3 [ts]" in str(exc.value)


def test_header_errors_name_the_field(tmp_path: Path) -> None:
    header = dict(HEADER, window={"start": "2026-03-01T14:00:00Z", "end": "2026-03-01T13:00:00Z"})
    header["truth"] = {"service": "db", "kind": "gremlins", "summary": "?"}
    rendered = [str(p) for p in validate(_fixture(tmp_path, header))]
    assert any("[window.end]" in r and "after start" in r for r in rendered), rendered
    assert any("[truth.kind]" in r and "unknown fault kind" in r for r in rendered), rendered


def _history(tmp_path: Path, starts: Mapping[str, str]) -> Path:
    """A set of recorded incidents, one folder each, whose alerts fired at ``starts`` (folder -> startsAt)."""
    for name, start in starts.items():
        (tmp_path / name).mkdir()
        header = dict(HEADER, alert=dict(HEADER["alert"], startsAt=start))
        (tmp_path / name / "incident.yaml").write_text(yaml.safe_dump(header))
    return tmp_path


def test_a_history_is_replayed_in_the_order_its_alerts_fired_offsets_compared_as_instants(tmp_path: Path) -> None:
    # 14:05+02:00 is 12:05 UTC: before 13:00Z, though its text sorts after it; b and c fired at the same
    # instant (written in two offsets) and keep their case order
    root = _history(
        tmp_path,
        {
            "a": "2026-03-01T13:00:00Z",
            "c": "2026-03-01T12:30:00Z",
            "b": "2026-03-01T14:30:00+02:00",
            "d": "2026-03-01T14:05:00+02:00",
        },
    )
    assert [d.name for d in in_time_order(root)] == ["d", "b", "c", "a"]


def test_a_history_with_an_unreadable_header_names_its_problem(tmp_path: Path) -> None:
    root = _history(tmp_path, {"a": "2026-03-01T13:00:00Z", "b": "yesterday"})
    with pytest.raises(FixtureError) as exc:
        in_time_order(root)
    assert "b/incident.yaml" in str(exc.value) and "alert.startsAt" in str(exc.value)


def test_missing_incident_yaml_is_a_clear_error(tmp_path: Path) -> None:
    problems = validate(tmp_path)
    assert problems and "incident.yaml" in str(problems[0]) and "missing" in str(problems[0])


def test_gzipped_telemetry_loads(tmp_path: Path) -> None:
    d = _fixture(tmp_path)
    line = json.dumps({"labels": {"__name__": "up", "service": "api"}, "samples": [[1772373600, 1.0]]})
    with gzip.open(d / "metrics.jsonl.gz", "wt") as fh:
        fh.write(line + "\n")
    recording, truth = load(d)
    assert recording.metrics[0].labels["service"] == "api"
    assert "metrics" in recording.present and truth is not None and truth.kind == "slow_query"


def test_loaded_records_keep_which_fields_their_own_line_gave(tmp_path: Path) -> None:
    # records that set the same fields share one record of them: each still answers for itself
    log = {"ts": "2026-03-01T14:00:00Z", "service": "api", "level": "INFO", "message": "GET /"}
    lines = [
        dict(log, trace_id="t1"),
        dict(log, message="GET /a"),
        dict(log, message="GET /b", pod="api-1", span_id="s1"),
        dict(log, message="GET /c"),
    ]
    d = _fixture(tmp_path, logs_jsonl="".join(json.dumps(x) + "\n" for x in lines))
    recording, _ = load(d)
    dumped = [r.record().model_dump(mode="json", exclude_unset=True) for r in recording.logs]
    assert dumped == lines
    assert [r.trace_id for r in recording.logs] == ["t1", None, None, None]
    assert [r.model_extra for r in recording.logs] == [None, None, {"span_id": "s1"}, None]
    with pytest.raises(AttributeError):  # a line as loaded cannot be changed (nor its fields' record)
        recording.logs[1].message = "changed"
    with pytest.raises(ValidationError):
        recording.logs[1].record().message = "changed"
    assert recording.logs[3].record().model_dump(mode="json", exclude_unset=True) == lines[3]
    assert json.loads(recording.model_dump_json())["logs"][2] == dict(lines[2], trace_id=None)


def test_a_log_line_whose_extra_fields_are_named_like_arguments_dumps_as_read(tmp_path: Path) -> None:
    line = {"ts": "2026-03-01T14:00:00Z", "service": "api", "level": "INFO", "message": "GET /"}
    line |= {"_fields_set": "x", "self": 1, "cls": None}
    d = _fixture(tmp_path, logs_jsonl=json.dumps(line) + "\n")
    (got,) = load(d)[0].logs
    assert got.record().model_dump(mode="json", exclude_unset=True) == line


def _loaded_and_kept(d: Path) -> tuple[Recording, int]:
    """A recording loaded, and the bytes of memory it holds once loaded (tracemalloc). Loaded once
    before: the JSON parser's string cache (pydantic-core's, bounded: 16,384 short texts a process)
    and Python's free lists then hold what they hold after any load, not this one's share of it."""
    load(d)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        recording, _ = load(d)
        return recording, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_a_recordings_log_lines_are_held_in_a_few_hundred_bytes_each(tmp_path: Path) -> None:
    # a large recording holds hundreds of thousands of lines: as models, with a dict of fields each,
    # 20,000 short lines took about 470 bytes a line
    lines = [
        {"ts": f"2026-03-01T14:{i // 6000:02d}:{i // 100 % 60:02d}.{i % 100:02d}Z", "service": "api"}
        | {"level": "INFO", "message": f"GET /{i}", "pod": "api-1"}
        for i in range(20_000)
    ]
    d = _fixture(tmp_path, logs_jsonl="".join(json.dumps(x) + "\n" for x in lines))
    recording, kept = _loaded_and_kept(d)
    assert kept < 260 * len(lines)
    assert [(r.message, r.pod, r.ts.second) for r in recording.logs[::997]] == [
        (x["message"], "api-1", i // 100 % 60) for i, x in enumerate(lines) if i % 997 == 0
    ]


def test_records_with_the_same_extra_texts_share_them_and_keep_their_json_types(tmp_path: Path) -> None:
    # a log line's host is one of a few: records holding the same texts share one dict of them, but
    # 1, 1.0 and true (equal in Python) stay each record's own, and so do lists
    log = {"ts": "2026-03-01T14:00:00Z", "service": "api", "level": "INFO"}
    extras: list[dict[str, Any]] = [
        {"host": "node-1"},
        {"host": "node-1"},
        {"host": "node-2"},
        {"host": "node-1", "version": None},
        {"host": "node-1", "version": None},
        {"retries": 1},
        {"retries": True},
        {"retries": 1.0},
        {"tags": ["a"]},
        {"tags": ["a"]},
    ]
    lines = [dict(log, message=f"line {i}", **x) for i, x in enumerate(extras)]
    d = _fixture(tmp_path, logs_jsonl="".join(json.dumps(x) + "\n" for x in lines))
    logs = load(d)[0].logs
    assert [r.record().model_dump(mode="json", exclude_unset=True) for r in logs] == lines
    assert [type(r.model_extra["retries"]) for r in logs[5:8] if r.model_extra] == [int, bool, float]
    assert logs[0].model_extra is logs[1].model_extra and logs[3].model_extra is logs[4].model_extra
    assert logs[2].model_extra is not logs[0].model_extra
    assert logs[8].model_extra is not logs[9].model_extra


LOG = {"ts": "2026-03-01T14:00:00Z", "service": "api", "level": "INFO", "message": "GET /"}


def _as_streamed(line: RecordedLine) -> tuple[Any, ...]:
    """A loaded line's fields, the types of its time zone and extra values, and which fields it gave."""
    extra = line.model_extra
    return (*line, type(line.ts.tzinfo), None if extra is None else [type(v) for v in extra.values()])


@pytest.mark.parametrize("batch", [2, 3, 4096])
def test_log_lines_load_as_the_records_a_stream_validates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    # the loader takes a batch of plain lines as parsed, checked a field at a time, and any other batch
    # a line at a time: every form a line may take loads as its validated record, sharing included
    monkeypatch.setattr("opsagent.fixtures.BATCH", batch)
    lines: list[Any] = [
        dict(LOG, trace_id="t1", span_id="s1"),
        dict(LOG, span_id="s1", pod=None),
        dict(LOG, span_id="s2", pod="api-1"),
        dict(LOG, ts="2026-03-01T15:00:00.1234567+01:00", span_id=None),
        dict(LOG, ts=1772373600.5),  # a time as a number: coerced
        dict(LOG, ts="1772373600"),
        dict(LOG, host="node-1", version=None),
        dict(LOG, version=None, host="node-1"),
        dict(LOG, retries=1, tags=["a"], nested={"x": [1.5, None, True]}),
        dict(LOG, span_id=7),
        dict(LOG, message="a" * 70, service="db", level="ERROR"),
    ]
    text = "".join(json.dumps(x) + "\n" for x in lines)
    text += '{"ts": "2026-03-01T14:00:00Z", "service": "a", "service": "b", "level": "I", "message": "twice"}\n'
    d = _fixture(tmp_path, logs_jsonl=text + "\n")
    loaded = load(d)[0].logs
    streamed = [RecordedLine.of(r) for r in stream(d / "logs.jsonl", "logs")]
    assert [_as_streamed(x) for x in loaded] == [_as_streamed(x) for x in streamed]
    assert len(loaded) == len(lines) + 1 and loaded[-1].service == "b"
    assert loaded[0].model_extra is loaded[1].model_extra  # the same texts: one dict
    assert loaded[6].model_extra == loaded[7].model_extra and list(loaded[7].model_extra or {}) == ["version", "host"]
    assert loaded[1].model_fields_set is loaded[2].model_fields_set  # the same fields given: one set
    assert [r.record().model_dump(mode="json", exclude_unset=True) for r in loaded[:4]] == [
        dict(x, ts=r.ts.isoformat().replace("+00:00", "Z")) for x, r in zip(lines[:4], loaded, strict=False)
    ]


@pytest.mark.parametrize("batch", [2, 4096])
def test_a_bad_log_line_is_named_by_line_and_field_among_plain_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    monkeypatch.setattr("opsagent.fixtures.BATCH", batch)
    bad = [
        json.dumps(dict(LOG, ts="2026-03-01T14:00:00")),  # no time zone
        json.dumps(dict(LOG, level=None)),
        json.dumps({k: v for k, v in LOG.items() if k != "message"}),
        json.dumps(dict(LOG, pod=3)),
        "{not json",
        json.dumps([LOG]),
    ]
    text = "".join(f"{json.dumps(dict(LOG, message=str(n)))}\n{line}\n" for n, line in enumerate(bad))
    d = _fixture(tmp_path)
    (d / "logs.jsonl").write_bytes(text.encode() + b'{"message": "\xff"}\n' + json.dumps(LOG).encode())
    problems = []
    for n, line in enumerate(text.splitlines(), start=1):  # each line alone, as a stream names it
        lone = tmp_path / f"{n}.jsonl"
        lone.write_text(line + "\n")
        try:
            list(stream(lone, "logs"))
        except FixtureError as exc:
            problems.extend((n, p.field, p.message) for p in exc.problems if p.line == 1)
    problems.append((13, None, "not UTF-8 text (byte 0xff at offset 13): save it as UTF-8"))
    assert [(p.line, p.field, p.message) for p in validate(d)] == problems
    assert [p[1] for p in problems] == ["ts", "level", "message", "pod", "(record)", "(record)", None]


def test_metric_samples_load_as_two_float_columns_and_read_as_the_pairs_given(tmp_path: Path) -> None:
    # 20,000 samples held as tuples of two floats took 2.2 MB; as columns they take 16 bytes each
    pairs = [(1_700_000_000.0 + 15 * i, i * 0.25) for i in range(20_000)]
    line = {"labels": {"__name__": "up", "service": "api"}, "samples": [[t, int(v) if v == 3 else v] for t, v in pairs]}
    d = _fixture(tmp_path, metrics_jsonl=json.dumps(line) + "\n")
    recording, kept = _loaded_and_kept(d)
    samples = recording.metrics[0].samples
    assert kept < 1_000_000
    assert samples == pairs and list(samples) == pairs and len(samples) == 20_000
    assert samples[3] == (1_700_000_045.0, 0.75) and type(samples[12][1]) is float
    assert samples[1:3] == pairs[1:3] and dict(samples[:2]) == dict(pairs[:2])
    assert recording.metrics[0].model_dump()["samples"] == pairs
    assert json.loads(recording.metrics[0].model_dump_json())["samples"] == [list(p) for p in pairs]
    assert pickle.loads(pickle.dumps(recording.metrics[0])) == recording.metrics[0]
    with pytest.raises(ValueError):  # the series' samples cannot be changed through them
        samples.values[0] = 1.0


def test_a_bad_metric_sample_is_named_by_line_and_field(tmp_path: Path) -> None:
    good = {"labels": {"__name__": "up"}, "samples": [[1, 2], [3, "4"]]}
    bad = {"labels": {"__name__": "up"}, "samples": [[1, 2], [3, "NaN"], [5]]}
    d = _fixture(tmp_path, metrics_jsonl=json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    found = [(p.line, p.field) for p in validate(d)]
    assert found == [(2, "samples.1.1"), (2, "samples.2.1")]
    assert MetricSeries(labels={"__name__": "up"}, samples=[(1, 2)]).samples == [(1.0, 2.0)]
    with pytest.raises(ValidationError):
        MetricSeries(labels={"__name__": "up"}, samples=[(1.0, math.inf)])


SPAN = {"trace_id": "t", "span_id": "a", "parent_id": None, "service": "api", "operation": "GET /"}


def _columns_equal(got: SpanColumns, want: SpanColumns) -> None:
    for name in SpanColumns.__dataclass_fields__:
        a, b = getattr(got, name), getattr(want, name)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b), name
        else:
            assert a == b, name


@pytest.mark.parametrize("batch", [2, 4096])
def test_spans_load_into_the_columns_the_span_records_give(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    # the loader reads spans from JSON straight into columns; every form a span may take (a start as
    # RFC 3339 or beyond int64, a duration as an integer, no status, an empty parent id, a repeated
    # span id, fields of its own) gives the columns its validated record gives
    monkeypatch.setattr("opsagent.fixtures.BATCH", batch)
    lines = [
        dict(SPAN, start=1772373600000000000, duration_us=5.5, status="error", pod="api-1"),
        dict(SPAN, span_id="b", parent_id="a", start=1772373600100000000, duration_us=2),
        dict(SPAN, span_id="c", parent_id="", service="db", start="2026-03-01T14:00:00.2+01:00", duration_us=1.0),
        dict(SPAN, span_id="b", parent_id="a", trace_id="u", start=1772373600300000000, duration_us=0, status="ok"),
        dict(SPAN, span_id="d", parent_id="b", service="db", operation="q", start=2**63, duration_us=1e-3),
        dict(SPAN, span_id="e", parent_id="d", start=1772373600500000000, duration_us=7.0, status="unset"),
    ]
    d = _fixture(tmp_path, traces_jsonl="".join(json.dumps(x) + "\n" for x in lines))
    recording, _ = load(d)
    _columns_equal(recording.traces, SpanColumns.read(stream(d / "traces.jsonl", "traces")))
    spans = recording.traces
    assert spans.services == ("api", "db") and len(spans) == 6
    # (trace, span id) coded in the order first named, a span's own before its parent's
    assert spans.own.tolist() == [0, 1, 2, 3, 5, 6] and spans.parent.tolist() == [-1, 0, -1, 4, 1, 5]
    assert spans.keys == 7 and spans.span_ids == ("a", "b", "c", "d", "e")
    assert spans.span_id.tolist() == [0, 1, 2, 1, 3, 4] and spans.parent_id.tolist() == [-1, 0, -1, 0, 1, 3]
    assert spans.error.tolist() == [True, False, False, False, False, False]
    assert spans.duration_us.tolist() == [5.5, 2.0, 1.0, 0.0, 1e-3, 7.0]
    assert spans.start[2] == datetime.fromisoformat("2026-03-01T14:00:00.2+01:00").timestamp()
    assert spans.start[4] == 2**63 / 1e9 and spans.start[0] == 1772373600000000000 / 1e9


@pytest.mark.parametrize("batch", [2, 4096])
def test_span_ids_that_are_not_ascii_are_coded_as_the_ascii_ones_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    # span ids are coded as bytes while every id is ASCII without a NUL; one that is not (here in the
    # second batch of two) turns the coding to texts, with the same codes, in the order first named
    monkeypatch.setattr("opsagent.fixtures.BATCH", batch)
    ids = ["a", "b", "spän", "a\0", "a", ""]
    lines = [
        dict(SPAN, span_id=span_id, parent_id=ids[n - 1] if n else None, start=1772373600000000000 + n, duration_us=1)
        for n, span_id in enumerate(ids)
    ]
    d = _fixture(tmp_path, traces_jsonl="".join(json.dumps(x) + "\n" for x in lines))
    spans = load(d)[0].traces
    _columns_equal(spans, SpanColumns.read(stream(d / "traces.jsonl", "traces")))
    assert spans.span_ids == ("a", "b", "spän", "a\0", "") and list(spans.span_ids) == list(spans.span_ids[:])
    assert spans.span_id.tolist() == [0, 1, 2, 3, 0, 4] and spans.parent_id.tolist() == [-1, 0, 1, 2, 3, 0]
    assert spans.span_ids.codes(["a\0", "spän", "x", "", "b"]).tolist() == [3, 2, -1, 4, 1]
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps(x) + "\n" for x in lines[:2]))
    ascii_only = read_spans(plain)
    assert ascii_only.span_ids.codes(["b", "spän", "a\0", "a"]).tolist() == [1, -1, -1, 0]


def test_a_recordings_spans_are_held_in_under_a_hundred_bytes_each(tmp_path: Path) -> None:
    # a large system's spans: each span id held as a Python text (and coded through a table of them)
    # took about 140 bytes a span with the columns; as bytes, about 85
    lines = [
        {"trace_id": f"{i // 20:032x}", "span_id": f"{i * 2654435761 % 2**64:016x}", "service": f"s{i % 9}"}
        | {"parent_id": f"{(i - 1) * 2654435761 % 2**64:016x}" if i % 20 else None, "operation": f"op{i % 13}"}
        | {"start": 1772373600000000000 + i * 1000, "duration_us": 100 + i % 7, "status": "ok"}
        for i in range(60_000)
    ]
    d = _fixture(tmp_path, traces_jsonl="".join(json.dumps(x) + "\n" for x in lines))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        spans = read_spans(d / "traces.jsonl")
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 100 * len(lines)
    assert spans.span_ids[7] == lines[7]["span_id"] and spans.parent_id[21] == 20 and len(spans.span_ids) == 60_000


def test_a_bad_span_is_named_by_line_and_field_as_a_span_record_would_be(tmp_path: Path) -> None:
    good = dict(SPAN, start=1772373600000000000, duration_us=1.0)
    text = "".join(
        line + "\n"
        for line in (
            json.dumps(good),
            json.dumps(dict(good, duration_us=-1)),
            json.dumps({k: v for k, v in good.items() if k != "parent_id"}),
            "{not json",
            json.dumps(dict(good, start="2026-03-01T14:00:00")),
            json.dumps(dict(good, status="fine")),
            json.dumps(dict(good, service=7)),
            json.dumps([good]),
        )
    )
    d = _fixture(tmp_path, traces_jsonl=text)
    problems = [(p.line, p.field) for p in validate(d)]
    assert problems == [
        (2, "duration_us"),
        (3, "parent_id"),
        (4, "(record)"),
        (5, "start"),
        (6, "status"),
        (7, "service"),
        (8, "(record)"),
    ]
    streamed = []
    for n in range(2, 9):  # the same problems as a stream of span records names, line by line
        lone = tmp_path / f"{n}.jsonl"
        lone.write_text(text.splitlines()[n - 1] + "\n")
        with pytest.raises(FixtureError) as exc:
            list(stream(lone, "traces"))
        streamed.append(exc.value.problems[0].message)
    assert [p.message for p in validate(d)] == streamed
    with pytest.raises(FixtureError) as whole:  # the traces file alone, as a benchmark or a script reads it
        read_spans(d / "traces.jsonl")
    assert whole.value.problems == validate(d)


def test_a_telemetry_file_streams_record_by_record_and_names_its_first_bad_line(tmp_path: Path) -> None:
    line = {"ts": "2026-03-01T14:00:00Z", "service": "api", "level": "INFO", "message": "ok"}
    path = tmp_path / "logs.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(json.dumps(line) + "\n\n" + json.dumps(dict(line, message="again")) + "\n")
        fh.write(json.dumps(dict(line, ts="yesterday")) + "\n" + json.dumps(line) + "\n")
    records = stream(path, "logs")
    assert next(records).message == "ok" and next(records).message == "again"
    with pytest.raises(FixtureError) as exc:
        next(records)
    assert "logs.jsonl.gz:4 [ts]" in str(exc.value)


def test_committed_json_schemas_match_the_loader() -> None:
    for name, schema in json_schemas().items():
        path = ROOT / "fixtures" / "schema" / f"{name.split('.')[0]}.schema.json"
        assert json.loads(path.read_text()) == schema, f"{path} is stale: run opsagent fixtures schema"


class SpyReasoner(PlaybookReasoner):
    """Records everything the pipeline hands a reasoner."""

    def __init__(self) -> None:
        super().__init__(load_default_playbooks())
        self.seen: list[str] = []

    def propose(
        self, incident: Incident, triage: Triage, *, k: int, lessons: Sequence[Lesson], exclude: set[str]
    ) -> list[Hypothesis]:
        self.seen += [incident.model_dump_json(), triage.model_dump_json()]
        return super().propose(incident, triage, k=k, lessons=lessons, exclude=exclude)

    async def decide(
        self,
        incident: Incident,
        hypothesis: Hypothesis,
        steps: Sequence[Step],
        observations: Mapping[str, Observation],
        *,
        final: bool,
    ) -> Decision:
        self.seen += [o.model_dump_json() for o in observations.values()]
        return await super().decide(incident, hypothesis, steps, observations, final=final)

    def reflect(
        self, incident: Incident, result: HypothesisResult, now: datetime, observations: Mapping[str, Observation]
    ) -> Lesson | None:
        self.seen.append(result.model_dump_json())
        return super().reflect(incident, result, now, observations)


def test_truth_never_reaches_the_reasoner(tmp_path: Path) -> None:
    d = tmp_path / ORDER_INCIDENT.name
    shutil.copytree(ORDER_INCIDENT, d)
    header = yaml.safe_load((d / "incident.yaml").read_text())
    marker = "ZEBRA-TRUTH-7731"
    header["truth"]["summary"] = marker
    header["truth"]["notes_for_graders"] = marker + "-extra"
    (d / "incident.yaml").write_text(yaml.safe_dump(header))
    recording, truth = load(d)
    assert "truth" not in Recording.model_fields and marker not in recording.model_dump_json()
    assert truth is not None and truth.summary == marker
    spy = SpyReasoner()
    report, _ = asyncio.run(investigate_fixture(d, reasoner=spy))
    assert spy.seen, "the spy saw nothing"
    assert not [s for s in spy.seen if marker in s]
    assert marker not in report.model_dump_json()
