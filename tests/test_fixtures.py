import asyncio
import gzip
import json
import shutil
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from opsagent.errors import FixtureError
from opsagent.fixtures import Recording, json_schemas, load, stream, validate
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
    span = {"trace_id": "t", "span_id": "a", "parent_id": None, "service": "api", "operation": "GET /"}
    lines = [
        dict(span, start=1772373600000000000, duration_us=5.0, status="error"),
        dict(span, span_id="b", start=1772373601000000000, duration_us=7.0),
        dict(span, span_id="c", start=1772373602000000000, duration_us=9.0, status="ok", pod="api-1"),
        dict(span, span_id="d", start=1772373603000000000, duration_us=3.0),
    ]
    d = _fixture(tmp_path, traces_jsonl="".join(json.dumps(x) + "\n" for x in lines))
    recording, _ = load(d)
    dumped = [s.model_dump(exclude_unset=True) for s in recording.traces]
    assert dumped == lines
    assert [s.status for s in recording.traces] == ["error", "unset", "ok", "unset"]
    with pytest.raises(ValidationError):  # a record as loaded cannot be changed (nor its fields' record)
        recording.traces[1].status = "error"
    assert recording.traces[3].model_dump(exclude_unset=True) == lines[3]


def test_records_with_the_same_extra_texts_share_them_and_keep_their_json_types(tmp_path: Path) -> None:
    # a span's pod is one of a few: records holding the same texts share one dict of them, but 1,
    # 1.0 and true (equal in Python) stay each record's own, and so do lists
    span = {"trace_id": "t", "parent_id": None, "service": "api", "operation": "GET /", "duration_us": 1.0}
    extras: list[dict[str, Any]] = [
        {"pod": "api-1"},
        {"pod": "api-1"},
        {"pod": "api-2"},
        {"pod": "api-1", "version": None},
        {"pod": "api-1", "version": None},
        {"retries": 1},
        {"retries": True},
        {"retries": 1.0},
        {"tags": ["a"]},
        {"tags": ["a"]},
    ]
    lines = [dict(span, span_id=f"s{i}", start=1772373600000000000 + i, **x) for i, x in enumerate(extras)]
    d = _fixture(tmp_path, traces_jsonl="".join(json.dumps(x) + "\n" for x in lines))
    traces = load(d)[0].traces
    assert [s.model_dump(exclude_unset=True) for s in traces] == lines
    assert [type(s.model_extra["retries"]) for s in traces[5:8] if s.model_extra] == [int, bool, float]
    assert traces[0].model_extra is traces[1].model_extra and traces[3].model_extra is traces[4].model_extra
    assert traces[2].model_extra is not traces[0].model_extra
    assert traces[8].model_extra is not traces[9].model_extra


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
