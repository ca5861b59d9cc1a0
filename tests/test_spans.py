"""A span's own time: its duration less the union of its children's intervals clipped to it, so
parallel calls count once and a child that outlives its parent counts only inside it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from opsagent.analysis.columns import SpanColumns
from opsagent.analysis.gaps import call_gaps
from opsagent.analysis.spans import span_times, trace_edges
from opsagent.fixtures import Span
from opsagent.incident import open_incident
from opsagent.models import Alert, TimeRange
from tests.conftest import ROOT

T0 = 1_700_000_000_000_000_000  # unix ns


def span(sid: str, parent: str | None, start_ms: float, duration_ms: float, status: str = "ok") -> Span:
    return Span.model_validate(
        {
            "trace_id": "t",
            "span_id": sid,
            "parent_id": parent,
            "service": f"svc-{sid}",
            "operation": "op",
            "start": T0 + int(start_ms * 1_000_000),
            "duration_us": duration_ms * 1000,
            "status": status,
        }
    )


def by_service(spans: list[Span]) -> dict[str, tuple[float, int, bool, bool]]:
    # unix seconds as floats hold a start to about a quarter of a microsecond: compare to 1 us
    return {t.service: (round(t.self_ms, 3), t.children, t.error, t.origin_error) for t in span_times(spans)}


def test_parallel_children_count_once_and_a_gap_is_the_parents_own() -> None:
    # parent 0-100 ms; children 10-50 and 30-60 overlap (50 ms covered), 80-90 is another 10 ms
    times = by_service(
        [span("p", None, 0, 100), span("a", "p", 10, 40), span("b", "p", 30, 30), span("c", "p", 80, 10)]
    )
    assert times["svc-p"] == (40.0, 3, False, False)
    assert times["svc-a"] == (40.0, 0, False, False)


def test_a_single_child_is_clipped_to_its_parent() -> None:
    # the child starts before and ends after its parent: it covers the parent whole, never more
    times = by_service([span("p", None, 10, 20), span("a", "p", 0, 50)])
    assert times["svc-p"] == (0.0, 1, False, False)
    times = by_service([span("p", None, 0, 100), span("a", "p", 90, 50)])
    assert times["svc-p"] == (90.0, 1, False, False)
    times = by_service([span("p", None, 0, 100), span("a", "p", 200, 5)])  # outside: covers nothing
    assert times["svc-p"] == (100.0, 1, False, False)


def test_an_error_originates_in_the_span_whose_children_did_not_fail() -> None:
    times = by_service([span("p", None, 0, 100, "error"), span("a", "p", 10, 40, "error"), span("b", "p", 60, 10)])
    assert times["svc-p"][2:] == (True, False)  # it failed because its child did
    assert times["svc-a"][2:] == (True, True)
    assert times["svc-b"][2:] == (False, False)


def test_no_spans_no_times_and_a_span_keeps_its_start_and_total() -> None:
    assert len(span_times([])) == 0 and list(span_times([])) == []
    (only,) = span_times([span("p", None, 250, 12.5)])
    assert only.start == (T0 + 250_000_000) / 1e9
    assert only.total_ms == 12.5 and round(only.self_ms, 3) == 12.5 and only.children == 0


def test_a_stream_of_spans_is_read_once_and_gives_the_same_times() -> None:
    spans = [span("p", None, 0, 100, "error"), span("a", "p", 10, 40, "error"), span("b", "p", 30, 30)]
    # an RFC 3339 start among unix nanoseconds: every start is then read one span at a time
    spans.append(Span.model_validate({**spans[2].model_dump(), "span_id": "c", "start": "2023-11-14T22:13:20.5Z"}))
    read: list[str] = []

    def stream() -> Iterator[Span]:
        for s in spans:
            read.append(s.span_id)
            yield s

    streamed = list(span_times(stream()))
    assert read == ["p", "a", "b", "c"]
    assert streamed == list(span_times(list(spans)))
    assert streamed[3].start == spans[3].start_s and streamed[0].start == spans[0].start_s
    assert [t.origin_error for t in streamed] == [False, True, False, False]


def _in(trace: str, s: Span, **changes: object) -> Span:
    return Span.model_validate({**s.model_dump(), "trace_id": trace, **changes})


def test_every_analysis_reads_the_same_columns_as_it_reads_the_spans() -> None:
    # two traces; in "u" the span id "p" is given twice: its children and its caller are its last span's
    spans = [span("p", None, 0, 100), span("a", "p", 10, 40), span("b", "p", 50, 30), span("c", "a", 20, 5)]
    spans += [_in("u", span("p", None, 0, 100)), _in("u", span("p", None, 5, 90), service="svc-q")]
    spans += [_in("u", span("d", "p", 10, 20)), _in("u", span("x", "gone", 30, 20))]  # a parent outside
    columns = SpanColumns.read(iter(spans))
    assert len(columns) == len(spans) and columns.keys == 8  # (trace, id) pairs, parents' included
    assert list(span_times(columns)) == list(span_times(spans))
    assert trace_edges(columns) == trace_edges(spans)
    assert [(e.caller, e.callee) for e in trace_edges(columns)] == [
        ("svc-a", "svc-c"),
        ("svc-p", "svc-a"),
        ("svc-p", "svc-b"),
        ("svc-q", "svc-d"),  # the last span of id "p" in trace "u" called it
    ]


def test_the_gap_of_a_call_is_the_same_read_from_columns_or_from_spans() -> None:
    onset = T0 / 1e9 + 600
    spans = []
    for i in range(20):  # a minute apart: a 10 ms call of web to api, 2 ms of it on the wire, then 6 ms
        start = T0 + i * 60_000_000_000
        server_ms = 8.0 if start / 1e9 < onset else 4.0
        spans.append(_in(f"t{i}", span(f"c{i}", None, 0, 10), service="svc-web", start=start))
        spans.append(_in(f"t{i}", span(f"s{i}", f"c{i}", 0, server_ms), service="svc-api", start=start))
    incident = open_incident(
        Alert(labels={"alertname": "Slow", "service": "svc-web"}, startsAt=datetime.fromtimestamp(onset, UTC)),
        window=TimeRange(start=datetime.fromtimestamp(T0 / 1e9, UTC), end=datetime.fromtimestamp(onset + 900, UTC)),
    )
    (gap,) = call_gaps(SpanColumns.read(spans), incident=incident)
    assert (gap.caller, gap.callee, gap.gap_ms_baseline, gap.gap_ms_window) == ("svc-web", "svc-api", 2.0, 6.0)
    assert call_gaps(SpanColumns.read(spans), incident=incident) == call_gaps(spans, incident=incident)
    assert call_gaps(SpanColumns.read(spans), incident=incident, service="svc-db") == []


@pytest.mark.parametrize("module", ["columns", "spans", "gaps", "steps"])
def test_each_trace_analysis_imports_first_in_a_fresh_interpreter(module: str) -> None:
    # the analyses import each other and the ranking imports them: no import cycle may hang on which
    # module a user (or a script) happens to import first
    done = subprocess.run(
        [sys.executable, "-c", f"import opsagent.analysis.{module}"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
