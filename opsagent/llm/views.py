"""What a model is shown, as text: the incident, triage, hypotheses, checks, and fenced telemetry.

Everything that comes from the systems under investigation — observation text, triage features and
reasons, change summaries and diffs, the alert's own words, lessons' readings — is *fenced*:

    <<<DATA id=l-1a2b3c source=logs call=logs.summary(service='order-service') trust=untrusted>>>
    …
    <<<END DATA l-1a2b3c>>>

and fence markers inside the data are neutralised, so a log line cannot close the fence and speak
as the program. Observations are already summaries (:mod:`opsagent.observations`); each is capped
to a token budget at whole lines, saying how much was left out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from opsagent.lessons import Retrieved
from opsagent.models import Hypothesis, Incident, LogsData, Observation
from opsagent.playbooks import Playbook, fill, placeholder_values
from opsagent.reasoner import action_of
from opsagent.tokens import chars_for, estimate_tokens
from opsagent.triage import Triage


def neutralise(text: str) -> str:
    return text.replace("<<<", "‹‹‹").replace(">>>", "›››")


def fence(label: str, body: str, **attrs: str) -> str:
    head = " ".join([f"id={neutralise(label)}", *(f"{k}={neutralise(v)}" for k, v in attrs.items()), "trust=untrusted"])
    return f"<<<DATA {head}>>>\n{neutralise(body).strip()}\n<<<END DATA {neutralise(label)}>>>"


def capped(text: str, max_tokens: int) -> str:
    """Whole lines, highest first, while they fit; then how many lines were left out."""
    lines = text.splitlines()
    out: list[str] = []
    used = 0
    for i, line in enumerate(lines):
        cost = estimate_tokens(line + "\n")
        if used + cost > max_tokens and out:
            left = len(lines) - i
            out.append(f"… {left} more line(s) not shown (narrow the call, e.g. by service or text, to see them)")
            break
        if used + cost > max_tokens:  # a single line longer than the cap: cut it, say so
            out.append(line[: chars_for(max_tokens)] + " … (line cut)")
            if len(lines) > 1:
                out.append(f"… {len(lines) - 1} more line(s) not shown")
            break
        out.append(line)
        used += cost
    return "\n".join(out)


def observation_block(obs: Observation, *, max_tokens: int, short: bool = False) -> str:
    body = obs.text if not short else obs.text.splitlines()[0] if obs.text else ""
    if short and len(obs.text.splitlines()) > 1:
        body += " … (shortened to save context; cite it by id)"
    return fence(
        obs.id, capped(body, max_tokens), source=obs.source.value if obs.source else "none", call=obs.action.key()
    )


def incident_text(incident: Incident) -> str:
    alerted = f", alert fired {incident.alerted_at:%H:%M:%S}Z" if incident.alerted_at else ""
    services = ", ".join(incident.services)
    head = (
        f"Incident {incident.id}: alerting service {incident.service} (services named: {services}); "
        f"symptom {incident.symptom.value}; onset {incident.onset:%Y-%m-%d %H:%M:%S}Z{alerted}; "
        f"telemetry {incident.window.start:%H:%M}-{incident.window.end:%H:%M}Z, "
        f"baseline {incident.baseline.start:%H:%M}-{incident.baseline.end:%H:%M}Z."
    )
    return head + "\nThe alert says:\n" + fence("alert", incident.title, source="alertmanager")


def triage_text(found: Triage, incident: Incident, *, top: int = 8) -> str:
    best = max((c.score for c in found.components), default=0.0) or 1.0
    lines = []
    for c in [c for c in found.components if c.score > 0 or c.component in incident.services][:top]:
        features = ", ".join(f"{f} {m:.2g}" for f, m in sorted(c.features.items(), key=lambda fm: -fm[1])[:10])
        role = " (alerting)" if c.component in incident.services else ""
        why = "; ".join(c.why[:3])
        lines.append(
            f"- {c.component}{role} score {c.score / best:.2f}: {features or 'no features'}"
            + (f"; why: {why}" if why else "")
        )
    if found.changes:
        lines.append("Changes around onset:")
        for ch in found.changes[-8:]:
            diff = " | ".join(
                ln.strip() for ln in (ch.diff or "").splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")
            )
            lines.append(
                f"- [{ch.id}] {_relative(ch.minutes_before_onset)}, {ch.kind} {ch.service}: {ch.summary}"
                + (f" (diff: {diff[:200]})" if diff else "")
            )
    callers = sorted({f"{e.caller}->{e.callee}" for e in found.graph})
    if callers:
        lines.append("Call graph: " + ", ".join(callers[:40]))
    return fence("triage", "\n".join(lines) or "triage found nothing", source="triage")


def log_highlights(
    found: Triage, incident: Incident, observations: Mapping[str, Observation], *, cap: int, top: int = 3
) -> str:
    """New or bursting templates from triage's per-service log summaries: the alerting service's, then
    the top suspects'. Raw telemetry, so fenced."""
    wanted = list(dict.fromkeys([*incident.services, *(c.component for c in found.components[:top])]))
    blocks = []
    for service in wanted:
        obs = next(
            (o for i in found.observation_ids if (o := observations.get(i)) is not None and _logs_of(o) == service),
            None,
        )
        if obs is None or not isinstance(obs.data, LogsData):
            continue
        lines = [
            f"[{t.id}] {'NEW' if t.new else 'BURST'} {'/'.join(t.levels)} x{t.window_count} "
            f"(baseline {t.baseline_count}): {t.template}"
            for t in obs.data.templates
            if t.new or t.bursting
        ]
        if lines:
            blocks.append(fence(obs.id, capped("\n".join(lines), cap // 2), source="logs", call=obs.action.key()))
    return "\n".join(blocks) or "(none)"


def _logs_of(obs: Observation) -> str | None:
    return obs.data.service if isinstance(obs.data, LogsData) else None


def _relative(minutes_before: float) -> str:
    if minutes_before >= 0:
        return f"{minutes_before:.0f} min before onset"
    return f"{-minutes_before:.0f} min after onset"


def candidates_text(candidates: Sequence[Hypothesis]) -> str:
    if not candidates:
        return "(none)"
    return "\n".join(
        json.dumps({"component": h.component, "kind": h.kind, "statement": h.statement, "prior": h.prior})
        for h in candidates
    )


def lessons_text(lessons: Sequence[Retrieved]) -> str:
    if not lessons:
        return "(none)"
    lines = [
        f"- when {r.lesson.trigger.condition}: {r.lesson.refuted_kind} was refuted by "
        f"{'; '.join(c.value for c in r.lesson.refuting_evidence[:2])}; "
        f"first call next time: {r.lesson.next_action.key()}"
        + (f" (its trigger shows on {r.component})" if r.component else "")
        + (
            f" [unreliable: the kind it refuted was the cause {r.lesson.times_misled} time(s), "
            f"it helped {r.lesson.times_helped}]"
            if r.lesson.unreliable
            else ""
        )
        for r in lessons
    ]
    return fence("lessons", "\n".join(lines), source="lesson-store")


def hypothesis_text(h: Hypothesis) -> str:
    lines = [f"{h.kind} on {h.component}: {neutralise(h.statement)}"]
    if h.id.startswith("model:") and h.why:
        lines.append(f"Why it was proposed: {neutralise(h.why[0])}")
    if not h.id.startswith("model:"):  # a playbook's criteria are its checks, listed below
        return "\n".join(lines)
    if h.confirm_if:
        lines.append("It would be confirmed if: " + " / ".join(neutralise(s) for s in h.confirm_if[:5]))
    if h.refute_if:
        lines.append("It would be refuted if: " + " / ".join(neutralise(s) for s in h.refute_if[:5]))
    return "\n".join(lines)


def checks_text(h: Hypothesis, incident: Incident, books: Sequence[Playbook]) -> str:
    """The readings the rules take for this kind, filled for the hypothesis' component, lessons' first."""
    entries = []
    for book in sorted(books, key=lambda b: (b.id != h.playbook, b.id)):
        for check in book.checks:
            action = action_of(check, h, incident)
            says = fill(check.says, placeholder_values(h.component, incident.symptom.value, incident.service))
            line = f"{action.tool}{json.dumps(action.args, sort_keys=True)} — {says}"
            if line not in entries:
                entries.append(line)
    first = [f"{a.tool}{json.dumps(a.args, sort_keys=True)}" for a in h.first_actions]
    entries.sort(key=lambda e: next((i for i, f in enumerate(first) if e.startswith(f)), len(first)))
    if not entries:
        return "(no rule knows this kind: evidence for it cannot be counted)"
    return "\n".join(f"{i}. {e}" for i, e in enumerate(entries, 1))
