"""The judge: an external rule that decides a hypothesis, never the reasoner's self-assessment.

* confirmed: >= 2 supporting evidence items from >= 2 kinds of evidence, each citing an observation
  that exists and came from the source it claims, and nothing refuting it; or, with nothing refuting
  it, a supporting item citing a read of the cluster in which an object of the hypothesis' component
  names the fault itself, of the hypothesis' kind (:func:`object_evidence`);
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

Object evidence is not statistical. A Deployment whose pods the API refuses "exceeded quota", a pod
the scheduler leaves Pending with its reason, a container waiting in ErrImagePull: the object's own
field names what broke, where a metric's shift only says that something did, and a second kind of
source is what tells a shift from a coincidence. The judge reads the finding in the cited
observation itself (:class:`opsagent.models.KubeFinding` with ``direct``), on the very component
and with the very kind the hypothesis names, so no check's say-so is taken on trust. A finding read
from logs, inferred from what is absent, or a symptom other causes give too (a crash loop, a failed
probe) is not direct and needs the second kind of source as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import structlog

from opsagent.fixtures import Edge
from opsagent.graph import callees_of
from opsagent.models import SOURCE_KINDS, Evidence, Hypothesis, KubernetesData, Observation, SourceKind, Verdict

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


def object_evidence(
    supporting: Iterable[Evidence], observations: Mapping[str, Observation], hypothesis: Hypothesis
) -> str | None:
    """The object field that names the hypothesis' fault on its own component, as a cited read of the
    cluster shows it (``Kind/namespace/name field``); None where no cited read shows one."""
    for ev in supporting:
        data = observations[ev.observation_id].data
        if ev.source != SourceKind.kubernetes or not isinstance(data, KubernetesData):
            continue
        for f in data.findings:
            if f.direct and f.component == hypothesis.component and f.kind == hypothesis.kind:
                return f"{f.object} {f.field}"
    return None


def judge(
    evidence: Iterable[Evidence],
    observations: Mapping[str, Observation],
    *,
    available: set[SourceKind],
    stop_reason: str | None = None,
    hypothesis: Hypothesis | None = None,
) -> Verdict:
    """The verdict on the evidence read so far. ``hypothesis``: what it is evidence for, which object
    evidence must name (without it, object evidence counts as any other)."""
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
    elif hypothesis is not None and (shown := object_evidence(supporting, observations, hypothesis)):
        verdict = Verdict(
            status="confirmed",
            reason=f"the object says so: {shown} names {hypothesis.kind} on {hypothesis.component}",
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


#: The mechanism that places a network delay on a component: the calls into it slowed, as its callers
#: see them (:mod:`opsagent.mechanisms`).
NETWORK_DELAY = "mech:calls_in"


def explained_errors(
    kind: str, component: str, graph: Sequence[Edge], features: Mapping[str, Mapping[str, float]]
) -> str | None:
    """Why a code-exception verdict cannot stand, or None where it can.

    A delay on the wire makes code fail that has no fault: calls time out, a timed-out write is retried
    and lands twice, and the next read finds two rows where it expects one. So a component's new
    exceptions name a fault in its code only where no network delay shows on it, or on a component it
    calls (whose slowness its calls run into): there the errors are what the delay does."""
    if kind != "code_exception":
        return None
    callees = sorted(callees_of(graph).get(component, set()) - {component})
    delayed = [c for c in [component, *callees] if NETWORK_DELAY in features.get(c, {})]
    if not delayed:
        return None
    return (
        f"the errors of {component} come with the calls into {', '.join(delayed)} slowed ({NETWORK_DELAY}): "
        "a network delay gives such errors without a fault in the code"
    )


def definitive(verdict: Verdict) -> bool:
    return verdict.status in ("confirmed", "refuted")
