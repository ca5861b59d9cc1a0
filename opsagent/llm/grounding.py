"""From what a model cites to evidence the judge can weigh: the model points, the data decides.

A model's citation names an observation and a stance. It becomes :class:`~opsagent.models.Evidence`
only when a *rule* for the hypothesis' fault kind reads that observation and the data meets the
rule's expectation. The rules are the playbooks' checks for that kind (every fault kind of the
taxonomy has a playbook), evaluated with the same expectation vocabulary the playbook reasoner uses.
So the stance is the data's, not the model's, and the statement the report shows is the rule's
reading ("threadpool_active peaked at 4/4"), never the model's prose.

This is what keeps telemetry that says "the root cause is X" from making X the verdict: a model
that believes it can cite all it likes, but only readings that bear on X's kind, taken on X's
component, and found true in the data count; and the judge still wants two kinds of source.

The price: a model cannot prove a fault kind with a reading no playbook for that kind takes. It
can still look at anything (its calls are observations), propose any kind on any component, and
choose what to verify first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from opsagent.models import Evidence, Hypothesis, Incident, Observation, SourceKind
from opsagent.playbooks import Check, Expectation, Playbook, context_for, evaluate, service_pattern
from opsagent.reasoner import action_of

Stance = Literal["supports", "refutes"]


class Claim(BaseModel):
    """What a model cites: an observation it has seen, and what it thinks the observation says."""

    model_config = ConfigDict(extra="ignore")

    observation_id: str = Field(description="the id of an observation shown earlier, e.g. m-1a2b3c")
    stance: Literal["supports", "refutes"] = Field(description="whether it supports or refutes the hypothesis")
    reason: str = Field(default="", description="in a few words, what in the observation says so")


@dataclass(frozen=True)
class Rule:
    playbook: str
    check: Check


@dataclass(frozen=True)
class Grounded:
    evidence: list[Evidence]
    notes: list[str]


class Rules:
    """Per fault kind, the checks its playbooks make: the readings that can decide that kind."""

    def __init__(self, playbooks: Sequence[Playbook]) -> None:
        self.by_kind: dict[str, list[Rule]] = {}
        for book in playbooks:
            self.by_kind.setdefault(book.kind, []).extend(Rule(book.id, c) for c in book.checks)

    def of(self, kind: str) -> list[Rule]:
        return self.by_kind.get(kind, [])

    def ground(
        self,
        claims: Sequence[Claim],
        hypothesis: Hypothesis,
        incident: Incident,
        observations: Mapping[str, Observation],
    ) -> Grounded:
        evidence: list[Evidence] = []
        notes: list[str] = []
        ctx = context_for(incident, hypothesis.component, observations)
        for claim in claims:
            obs = observations.get(claim.observation_id)
            if obs is None:
                notes.append(f"not counted: there is no observation {claim.observation_id!r}")
                continue
            if not obs.ok or obs.source is None:
                notes.append(f"not counted: {obs.id} is an error, not a reading")
                continue
            rules = [r for r in self.of(hypothesis.kind) if fits(r.check, obs, hypothesis, incident)]
            if not rules:
                notes.append(
                    f"not counted: {obs.id} ({obs.action.key()}) is not a reading that decides "
                    f"{hypothesis.kind} on {hypothesis.component}"
                )
                continue
            found: list[Evidence] = []
            readings: list[str] = []
            for rule in rules:
                pairs: tuple[tuple[Stance, Expectation | None], ...] = (
                    ("supports", rule.check.confirm),
                    ("refutes", rule.check.refute),
                )
                for stance, exp in pairs:
                    if exp is None:
                        continue
                    outcome = evaluate(exp, obs, ctx)
                    readings.append(outcome.value)
                    if outcome.met:
                        found.append(
                            Evidence(
                                observation_id=obs.id,
                                source=SourceKind(obs.source),
                                stance=stance,
                                statement=outcome.value,
                                check=f"{rule.playbook}.{rule.check.id}",
                            )
                        )
            if not found:
                reading = "; ".join(dict.fromkeys(readings)) or "no data"
                notes.append(f"not counted: {obs.id} neither supports nor refutes by the rule ({reading})")
                continue
            for e in found:
                agrees = "" if e.stance == claim.stance else f" (you said {claim.stance}; the data says otherwise)"
                notes.append(f"counted: {obs.id} {e.stance} — {e.statement}{agrees}")
            evidence.extend(found)
        return Grounded(evidence=evidence, notes=notes)


def fits(check: Check, obs: Observation, hypothesis: Hypothesis, incident: Incident) -> bool:
    """Whether an observation is the reading a check takes for this hypothesis, or an equivalent one.

    Same tool; the same arguments as the check's, filled for the hypothesis' component, except that a
    text search may be any that names the component, a change window may be wider, and changes and
    traces may be read for every service at once (their rules pick the component out)."""
    if obs.action.tool != check.tool:
        return False
    wanted = action_of(check, hypothesis, incident).args
    got = obs.action.args
    for key in set(wanted) | set(got):
        want, have = wanted.get(key), got.get(key)
        if key == "text" and want is not None:
            if not isinstance(have, str) or not _names(have, hypothesis.component):
                return False
        elif key == "before_min":
            if float(str(have if have is not None else 60)) < float(str(want if want is not None else 60)):
                return False
        elif key == "service" and have is None and check.tool in ("changes.list", "traces.summary"):
            continue
        elif want != have:
            return False
    return True


def _names(text: str, component: str) -> bool:
    if component.lower() in text.lower():
        return True
    try:
        return (
            re.search(service_pattern(component), text, re.I) is not None
            or re.search(text, component, re.I) is not None
        )
    except re.error:
        return False


def counted_summary(evidence: Sequence[Evidence]) -> str:
    supports = sorted({e.source.value for e in evidence if e.stance == "supports"})
    refutes = sum(1 for e in evidence if e.stance == "refutes")
    n_sup = len({(e.observation_id, e.check) for e in evidence if e.stance == "supports"})
    parts = [f"{n_sup} supporting" + (f" ({', '.join(supports)})" if supports else "")]
    parts.append(f"{refutes} refuting")
    return ", ".join(parts)
