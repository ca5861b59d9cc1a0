"""``opsagent record``: investigate an alert against live sources and keep what was read as a
recorded incident, so a real incident becomes a regression test.

The readers are wrapped with a :class:`~adapters.wrappers.Recorder`; after the investigation the raw
telemetry it read is written in the fixture format (``incident.yaml``, ``metrics.jsonl``,
``logs.jsonl``, ``changes.jsonl``, ``traces.jsonl``, ``kubernetes.jsonl``) with secrets redacted, and validated. Series
that were the value of a PromQL expression (no metric name of their own) are written under the
signal they answered, ``opsagent:<signal>``, with the catalog override that reads them back.
It writes only into the output directory.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from adapters.config import open_live_sources
from adapters.sourceconfig import SourcesConfig
from adapters.wrappers import QUERY_LABEL, Recorder
from opsagent.analysis.series import SERVICE_LABELS, is_counter
from opsagent.catalog import SignalCatalog
from opsagent.errors import Problem
from opsagent.fixtures import Change, LogRecord, MetricSeries, SignalDef, Span, validate
from opsagent.loop import Budget
from opsagent.models import Alert, Incident, Report
from opsagent.pipeline import investigate
from opsagent.plan import Planner
from opsagent.playbooks import Playbook
from opsagent.redaction import redact as redact_text
from opsagent.redaction import redactors
from opsagent.sources.queries import EXPRESSION_NAME

#: One step of redaction: text in, text with secrets replaced out.
Redaction = Callable[[str], str]


def _redact_model(model: BaseModel, redact: Redaction) -> dict[str, Any]:
    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return redact(value)
        if isinstance(value, dict):
            return {walk(k): walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    data: dict[str, Any] = walk(model.model_dump(mode="json", by_alias=True, exclude_none=True))
    return data


# ---------------------------------------------------------------- naming expression results


def _components(recorder: Recorder, incident: Incident) -> set[str]:
    names = set(incident.services)
    for key in recorder.series:
        labels = dict(key)
        names.update(labels[label] for label in (*SERVICE_LABELS, "callee", "caller") if labels.get(label))
    names.update(r.service for r in recorder.logs.values())
    names.update(c.service for c in recorder.changes.values())
    names.update(s.service for s in recorder.spans.values())
    return names


def name_expressions(
    recorder: Recorder, catalog: SignalCatalog, incident: Incident
) -> tuple[list[MetricSeries], dict[str, dict[str, str]]]:
    """Every recorded series, expression results named after the signal (or limit) they answered,
    and the catalog overrides that read them back in replay."""
    answered: dict[str, tuple[str, str, str]] = {}  # query -> (signal, component, "query"|"limit")
    components = _components(recorder, incident)
    for signal, spec in catalog.signals.items():
        for component in components:
            answered[catalog.query(signal, component)] = (signal, component, "query")
            if spec.limit:
                answered[spec.limit.replace("$service", component)] = (signal, component, "limit")
    out: list[MetricSeries] = []
    overrides: dict[str, dict[str, str]] = {}
    for key, samples in sorted(recorder.series.items()):
        labels = dict(key)
        if labels.get("__name__") == EXPRESSION_NAME:
            query = labels.pop(QUERY_LABEL, "")
            hit = answered.get(query)
            if hit is None:
                labels["__name__"] = "opsagent:expr_" + hashlib.sha1(query.encode()).hexdigest()[:8]
            else:
                signal, component, part = hit
                spec = catalog.signals[signal]
                label = "callee" if spec.scope == "edge" else "service"
                metric = f"opsagent:{signal}" + ("_limit" if part == "limit" else "")
                labels = {"__name__": metric, label: component}
                overrides.setdefault(signal, {})[part] = f'{metric}{{{label}="$service"}}'
        out.append(MetricSeries(labels=labels, samples=sorted(samples.items())))
    return out, overrides


# ---------------------------------------------------------------- writing


def write_fixture(
    out: Path,
    *,
    alert: Alert,
    incident: Incident,
    recorder: Recorder,
    catalog: SignalCatalog,
    redact: Redaction,
    sources: Sequence[str],
    now: datetime,
) -> list[Problem]:
    """Write what the recorder holds as a recorded incident in ``out``; the validator's problems."""
    out.mkdir(parents=True, exist_ok=True)
    series, overrides = name_expressions(recorder, catalog, incident)
    header: dict[str, Any] = {
        "alert": _redact_model(alert, redact),
        "window": {"start": incident.window.start.isoformat(), "end": incident.window.end.isoformat()},
        "baseline": {"start": incident.baseline.start.isoformat(), "end": incident.baseline.end.isoformat()},
        "meta": (
            f"Recorded live by `opsagent record` at {now.isoformat()} from {', '.join(sources) or 'no source'}: "
            "what the investigation read, at the sources' resolution (metrics at the query step, log lines up to "
            "each source's cap), secrets redacted."
        ),
    }
    if not recorder.spans and recorder.edges:
        header["topology"] = [{"caller": a, "callee": b, "source": "traces"} for a, b in sorted(recorder.edges)]
    if overrides:
        header["signals"] = {signal: parts for signal, parts in sorted(overrides.items())}
    (out / "incident.yaml").write_text(yaml.safe_dump(header, sort_keys=False, allow_unicode=True), encoding="utf-8")
    metrics = [{**_redact_model(s, redact), "type": "counter" if is_counter(s.name, None) else "gauge"} for s in series]
    _write_jsonl(out / "metrics.jsonl", metrics)
    _write_jsonl(out / "logs.jsonl", [_redact_model(r, redact) for r in _by_time(recorder.logs.values())])
    _write_jsonl(out / "changes.jsonl", [_redact_model(c, redact) for c in _changes(recorder.changes.values())])
    _write_jsonl(out / "traces.jsonl", [_redact_model(s, redact) for s in _spans(recorder.spans.values())])
    kube = sorted(recorder.kubernetes.values(), key=lambda o: (o.kind, o.namespace, o.name))
    _write_jsonl(out / "kubernetes.jsonl", [_redact_model(o, redact) for o in kube])
    return validate(out)


def _by_time(records: Iterable[LogRecord]) -> list[LogRecord]:
    return sorted(records, key=lambda r: (r.ts, r.service))


def _changes(changes: Iterable[Change]) -> list[Change]:
    return sorted(changes, key=lambda c: (c.ts, c.id))


def _spans(spans: Iterable[Span]) -> list[Span]:
    return sorted(spans, key=lambda s: (s.start_s, s.trace_id, s.span_id))


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    if not rows:
        path.unlink(missing_ok=True)
        return
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")


async def record_incident(
    alert: Alert,
    *,
    out: Path,
    sources_config: SourcesConfig,
    signals: Mapping[str, SignalDef],
    playbooks: Sequence[Playbook],
    budget: Budget,
    environ: Mapping[str, str] | None = None,
    now: datetime | None = None,
) -> tuple[Report, list[Problem]]:
    """Investigate ``alert`` against the configured live sources, recording what they return, and
    write it to ``out``. Returns the report and the validator's problems (none when all is well)."""
    env = os.environ if environ is None else environ
    recorder = Recorder()
    stamp = now or datetime.now(UTC)
    async with open_live_sources(sources_config, signals=signals, environ=env, recorder=recorder) as live:
        plan = Planner(playbooks=tuple(playbooks), budget=budget).plan(live.reading(alert))
        report = await investigate(plan, now=stamp)
        names = [r.name for r in live.readers]
    chain = redactors(environ=env)  # the project's one chain, with the secrets this environment holds

    def redact(text: str) -> str:
        return redact_text(text, chain)[0]

    problems = write_fixture(
        out,
        alert=alert,
        incident=report.incident,
        recorder=recorder,
        catalog=live.catalog,
        redact=redact,
        sources=names,
        now=stamp,
    )
    return report, problems
