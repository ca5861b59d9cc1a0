"""Rendering a report: terminal (rich), Markdown and JSON. Pure presentation, no analysis."""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from opsagent.models import Report

_STYLE = {"confirmed": "bold green", "probable": "yellow", "inconclusive": "bold red", "refuted": "red"}


def to_json(report: Report, *, observations: bool = False) -> str:
    exclude = None if observations else {"observations"}
    return report.model_dump_json(indent=2, exclude=exclude)


def _headline(report: Report) -> str:
    rc = report.root_cause
    if rc is None:
        return "INCONCLUSIVE — needs a human"
    return f"{report.status.upper()}: {rc.kind} on {rc.component} (confidence {report.confidence:.2f})"


def model_summary(report: Report) -> str | None:
    """One line on the LLM reasoner's part: model, calls, tokens, cost, what fell back (None for
    the playbook reasoner)."""
    rec = report.llm
    if rec is None:
        return None
    u = rec.usage
    cost = f"${u.cost_usd:.4f}" if u.cost_usd is not None else "no price for this model"
    estimated = f" ({u.estimated_calls} estimated)" if u.estimated_calls else ""
    line = (
        f"model {rec.model} at {rec.base_url} ({rec.mode}): {u.calls} calls, {u.prompt_tokens} prompt + "
        f"{u.completion_tokens} completion tokens{estimated}, {cost}"
    )
    if rec.fallbacks:
        line += f"; the playbook reasoner stood in {rec.fallbacks} time(s)"
    if rec.budget_exhausted:
        line += f"; stopped asking: {rec.budget_exhausted}"
    return line


def to_markdown(report: Report) -> str:
    inc = report.incident
    lines = [
        f"# {inc.title}",
        "",
        f"- incident: `{inc.id}` · services: {', '.join(inc.services)} · symptom: {inc.symptom.value}",
        f"- onset: {inc.onset:%Y-%m-%d %H:%M:%S} UTC · strategy: {report.strategy}",
        "",
        f"## {_headline(report)}",
        "",
        report.statement,
        "",
    ]
    if report.evidence:
        lines += ["## Evidence", ""]
        lines += [f"- `{e.observation_id}` ({e.source.value}) {e.statement}" for e in report.evidence]
        lines.append("")
    if report.timeline:
        lines += ["## Timeline", ""]
        lines += [f"- {e.ts:%H:%M:%S} {e.kind}: {e.what}" for e in report.timeline]
        lines.append("")
    refuted = report.refuted
    if refuted:
        lines += ["## Ruled out", ""]
        for r in refuted:
            cites = "; ".join(f"`{e.observation_id}` {e.statement}" for e in r.verdict.refuting)
            lines.append(f"- **{r.hypothesis.kind}** on {r.hypothesis.component}: {cites}")
        lines.append("")
    others = [
        r for r in report.results if r.verdict.status not in ("refuted",) and r.verdict.supporting != report.evidence
    ]
    if others:
        lines += ["## Other hypotheses", ""]
        lines += [
            f"- {r.hypothesis.kind} on {r.hypothesis.component}: {r.verdict.status} ({r.verdict.reason})"
            for r in others
        ]
        lines.append("")
    lines += ["## Suspects", "", "| # | component | kind | status | score | why |", "|---|---|---|---|---|---|"]
    for i, s in enumerate(report.suspects[:8], 1):
        lines.append(f"| {i} | {s.component} | {s.kind} | {s.status} | {s.score:.3f} | {s.why} |")
    lines.append("")
    if report.changes:
        lines += ["## Changes in flight", "", "| # | change | service | versions | new version | score | why |"]
        lines.append("|---|---|---|---|---|---|---|")
        for i, ch in enumerate(report.changes[:5], 1):
            lines.append(
                f"| {i} | {ch.id} | {ch.service} | {ch.from_version or '?'} -> {ch.to_version or '?'} | {ch.verdict} "
                f"| {ch.score:.3f} | {'; '.join(ch.why)} |"
            )
        lines.append("")
    if report.unreadable_sources:
        lines += ["## Sources that could not be read", ""]
        lines += [f"- {k}: {v}" for k, v in report.unreadable_sources.items()]
        lines.append("")
    if report.lessons_used:
        lines += ["## Lessons used", ""]
        lines += [
            f"- `{u.lesson_id}` (relevance {u.relevance:.2f}): {'; '.join(u.effects) or 'no effect'}"
            for u in report.lessons_used
        ]
        lines.append("")
    if report.lessons:
        lines += ["## Lessons written", ""]
        lines += [
            f"- when {le.trigger.condition}: {le.refuted_kind} was refuted by "
            f"{'; '.join(c.value for c in le.refuting_evidence)}; next time first run `{le.next_action.key()}`"
            for le in report.lessons
        ]
        lines.append("")
    lines += plan_lines(report)
    if report.next_steps:
        lines += ["## Next steps", ""] + [f"- {s}" for s in report.next_steps] + [""]
    model = model_summary(report)
    if model is not None and report.llm is not None:
        lines += ["## Model", "", model, ""]
        lines += [f"- {note}" for note in report.llm.notes]
        lines += [""] if report.llm.notes else []
    c = report.cost
    lines.append(
        f"_cost: {c.steps} steps, {c.tool_calls} tool calls ({c.cache_hits} cached), "
        f"~{c.tokens} tokens, {c.wall_ms:.0f} ms_"
    )
    return "\n".join(lines) + "\n"


def plan_lines(report: Report) -> list[str]:
    """The plan (strategy ``plan``) and every re-plan, in Markdown; nothing for the other strategies."""
    if not report.plan:
        return []
    lines = ["## Plan", "", f"objective `{report.plan[0].objective}` (the incident; the same in every revision)", ""]
    for rev in report.plan:
        cited = f" (`{rev.observation_id}`)" if rev.observation_id else ""
        lines.append(f"{rev.index}. {rev.reason}{cited}")
        lines += [f"   - out: {d}" for d in rev.dropped] + [f"   - in: {a}" for a in rev.added]
        lines += [
            f"   - {i.kind} on {i.component}: next `{i.next_call or 'none'}`, {i.steps_taken} checked"
            for i in rev.items
        ]
    return [*lines, ""]


def render(report: Report, console: Console) -> None:
    head = Text(_headline(report), style=_STYLE.get(report.status, "bold"))
    body: list[Text | Table] = [head, Text(report.statement)]
    if report.evidence:
        ev = Table(title="Evidence", show_header=True, expand=True)
        ev.add_column("obs")
        ev.add_column("source")
        ev.add_column("finding", ratio=1)
        for e in report.evidence:
            ev.add_row(e.observation_id, e.source.value, escape(e.statement))  # "[chg-1]" is text, not markup
        body.append(ev)
    if report.timeline:
        tl = Table(title="Timeline", show_header=False)
        for t in report.timeline:
            tl.add_row(f"{t.ts:%H:%M:%S}", t.kind, escape(t.what))
        body.append(tl)
    if report.refuted:
        ru = Table(title="Ruled out", expand=True)
        ru.add_column("hypothesis")
        ru.add_column("refuted by", ratio=1)
        for r in report.refuted:
            ru.add_row(
                f"{r.hypothesis.kind} @ {r.hypothesis.component}",
                escape("; ".join(f"{e.observation_id}: {e.statement}" for e in r.verdict.refuting)),
            )
        body.append(ru)
    sus = Table(title="Suspects")
    for col in ("#", "component", "kind", "status", "score"):
        sus.add_column(col)
    for i, s in enumerate(report.suspects[:5], 1):
        sus.add_row(str(i), s.component, s.kind, s.status, f"{s.score:.3f}")
    body.append(sus)
    if report.changes:
        flight = Table(title="Changes in flight")
        for col in ("#", "change", "service", "versions", "new version", "score"):
            flight.add_column(col)
        for i, ch in enumerate(report.changes[:5], 1):
            versions = f"{ch.from_version or '?'} -> {ch.to_version or '?'}"
            flight.add_row(str(i), ch.id, ch.service, versions, ch.verdict, f"{ch.score:.3f}")
        body.append(flight)
    acted = [u for u in report.lessons_used if u.acted]
    if acted:
        body.append(
            Text("Lessons used: " + "; ".join(f"{u.lesson_id}: {', '.join(u.effects)}" for u in acted), style="magenta")
        )
    if report.unreadable_sources:
        body.append(
            Text(
                "Could not read: " + "; ".join(f"{k} ({v})" for k, v in report.unreadable_sources.items()),
                style="yellow",
            )
        )
    model = model_summary(report)
    if model is not None and report.llm is not None:
        notes = len(report.llm.notes)
        more = f" ({notes} note(s); opsagent prompts shows them)" if notes else ""
        body.append(Text(model + more, style="blue"))
    c = report.cost
    body.append(
        Text(
            f"cost: {c.steps} steps, {c.tool_calls} tool calls ({c.cache_hits} cached), "
            f"~{c.tokens} tokens, {c.wall_ms:.0f} ms",
            style="dim",
        )
    )
    console.print(Panel(Group(*body), title=f"opsagent · {report.incident.title}", border_style="cyan"))
