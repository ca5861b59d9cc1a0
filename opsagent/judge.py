"""The judge: an external rule that decides a hypothesis, never the reasoner's self-assessment.

* confirmed: >= 2 supporting evidence items from >= 2 kinds of evidence, each citing an observation
  that exists and came from the source it claims, and nothing refuting it;
* refuted: at least one refuting evidence item that cites a real observation;
* probable: where the environment offers only one kind of data source, >= 2 supporting items;
* otherwise inconclusive.

The kinds of evidence are the kinds of data source, and the canary comparison of a rollout
(``versions``): read from the metrics source, but a controlled comparison (the new version's pods
against the old's, same minutes, same traffic) that a before/after shift of the same metrics does not
repeat. So a change record and a comparison of the change's versions that agree confirm a change
where metrics are the only telemetry. The comparison is not a data source an environment offers:
``available`` counts data sources only, and an environment with metrics alone stays a one-source
environment for every other hypothesis.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import structlog

from opsagent.models import SOURCE_KINDS, Evidence, Observation, SourceKind, Verdict

log = structlog.get_logger("opsagent.judge")


def cited(evidence: Iterable[Evidence], observations: Mapping[str, Observation]) -> list[Evidence]:
    """Evidence whose citation checks out, each (observation, stance, check) counted once."""
    seen: set[tuple[str, str, str | None]] = set()
    out = []
    for ev in evidence:
        obs = observations.get(ev.observation_id)
        if obs is None or not obs.ok or obs.source != ev.source:
            continue
        key = (ev.observation_id, ev.stance, ev.check)
        if key not in seen:
            seen.add(key)
            out.append(ev)
    return out


def judge(
    evidence: Iterable[Evidence],
    observations: Mapping[str, Observation],
    *,
    available: set[SourceKind],
    stop_reason: str | None = None,
) -> Verdict:
    valid = cited(evidence, observations)
    supporting = [e for e in valid if e.stance == "supports"]
    refuting = [e for e in valid if e.stance == "refutes"]
    kinds = {e.source for e in supporting}
    offered = available & SOURCE_KINDS  # data sources; the canary comparison is read from one of them
    if refuting:
        verdict = Verdict(status="refuted", reason=refuting[0].statement, supporting=supporting, refuting=refuting)
    elif len(supporting) >= 2 and len(kinds) >= 2:
        verdict = Verdict(
            status="confirmed",
            reason=f"{len(supporting)} supporting observations from {', '.join(sorted(kinds))}",
            supporting=supporting,
        )
    elif len(offered) == 1 and len(supporting) >= 2:
        verdict = Verdict(
            status="probable",
            reason=f"{len(supporting)} supporting observations, all from the only source ({next(iter(offered))})",
            supporting=supporting,
        )
    else:
        reason = stop_reason or "not enough evidence yet"
        verdict = Verdict(status="inconclusive", reason=reason, supporting=supporting)
    return verdict


def definitive(verdict: Verdict) -> bool:
    return verdict.status in ("confirmed", "refuted")
