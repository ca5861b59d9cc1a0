"""Rendering a report: terminal text (rich), Markdown and JSON, and the search tree in each. Pure
presentation, no analysis.

The terminal and the Markdown say the same facts in the same order (the HTML page, in
:mod:`opsagent.service.pages`, adds charts). Every cell reaches the terminal as
:class:`rich.text.Text`, never as markup: ``[chg-5c1e7a2]`` and ``log:new:tls`` are data. The
terminal report fits the console's width (80 columns on a plain terminal); a URL is the one thing
printed whole on a line of its own, since a URL cut in two opens nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from opsagent.models import (
    REPORT_SCHEMA_VERSION,
    HypothesisResult,
    Lesson,
    LessonUse,
    Report,
    SearchNode,
    SearchRound,
    SearchTree,
    StopReason,
)

_STYLE = {"confirmed": "bold green", "probable": "yellow", "inconclusive": "bold red", "refuted": "red"}
_MARK = {"confirmed": "✓", "probable": "~", "refuted": "✗", "inconclusive": "?"}


def to_json(report: Report, *, observations: bool = False) -> str:
    """The report as JSON (:func:`json_schema` describes it); observations only when asked for."""
    exclude = None if observations else {"observations"}
    return report.model_dump_json(indent=2, exclude=exclude)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the JSON report, generated from the model (opsagent/data/report.schema.json)."""
    schema = Report.model_json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"opsagent report, schema version {REPORT_SCHEMA_VERSION}"
    return schema


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


# ---------------------------------------------------------------- facts every form says alike


def when(ts: datetime) -> str:
    """A moment with its date and zone: 2026-03-17 14:03:00 UTC."""
    return f"{ts:%Y-%m-%d %H:%M:%S} UTC"


def clock_on(ts: datetime, day: datetime) -> str:
    """The time of day, with the date when it is not ``day``'s (the timeline's heading gives that)."""
    return f"{ts:%H:%M:%S}" if ts.date() == day.date() else f"{ts:%Y-%m-%d %H:%M:%S}"


def headline(report: Report) -> str:
    rc = report.root_cause
    if rc is None:
        return "INCONCLUSIVE — needs a human"
    return f"{report.status.upper()}: {rc.kind} on {rc.component} (confidence {report.confidence:.2f})"


#: What the suspects' order is by: a proven cause's score is its hypothesis score, the rest's their
#: triage score, so the printed scores need not fall from top to bottom (opsagent.ranking.suspects).
SUSPECT_ORDER = (
    "ordered by verdict: proven causes first (a change, then a cause that accounts for another, then the "
    "higher hypothesis score), then the rest by triage score"
)


def first_action(report: Report) -> tuple[str, str] | None:
    """The one thing to do first and why, for the first lines of every view (None without a next step)."""
    if not report.next_steps:
        return None
    action = report.next_steps[0]
    rc = report.root_cause
    if rc is not None:
        sources = sorted({e.source.value for e in report.evidence})
        why = (
            f"{rc.kind} on {rc.component} is {report.status} by {len(report.evidence)} observation(s) "
            f"from {', '.join(sources) or 'no source'}"
        )
        if report.change is not None:
            why += f"; {report.change.id} is the change that set it off"
        return action, why
    top = report.suspects[0] if report.suspects else None
    why = "nothing was proven"
    if top is not None:
        why += f"; {top.component} ranks first: {top.why}"
    return action, why


def rival_lines(report: Report) -> list[str]:
    """Each other proven cause and how it stands to the root cause, one line each."""
    out = []
    for r in report.also_proven:
        how = "caused by the root cause" if r.relation == "caused_by_root_cause" else "ranked below the root cause"
        out.append(f"Also {r.status}: {r.kind} on {r.component}, {how}: {r.why}")
    return out


#: The columns of an alert storm's table (:func:`alert_rows`).
ALERT_HEADS = ("alert", "services", "fired", "joined because", "explained by")


def alert_rows(report: Report) -> list[tuple[str, ...]]:
    """An alert storm's alerts, the lead first: what fired where and when, why it joined, and
    which cause explains it (or that none does)."""
    day = report.incident.onset
    rows: list[tuple[str, ...]] = []
    for entry in report.alerts:
        a = entry.alert
        explained = f"{entry.cause} ({entry.how})" if entry.cause else entry.how
        rows.append(
            (
                a.alertname,
                ", ".join(a.services) or "-",
                clock_on(a.starts_at, day),
                a.reason or "opened the incident",
                explained,
            )
        )
    return rows


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


def cost_line(report: Report) -> str:
    c = report.cost
    line = (
        f"cost: {c.steps} steps, {c.tool_calls} tool calls ({c.cache_hits} cached), "
        f"~{c.tokens} tokens, {c.wall_ms:.0f} ms · strategy {report.strategy}"
    )
    return line + (f" · stopped early: {report.budget_exhausted}" if report.budget_exhausted else "")


def other_results(report: Report) -> list[HypothesisResult]:
    """Verified hypotheses that are neither the conclusion nor ruled out."""
    rc = report.root_cause
    return [
        r
        for r in report.results
        if r.verdict.status != "refuted"
        and (rc is None or (r.hypothesis.component, r.hypothesis.kind) != (rc.component, rc.kind))
    ]


def held_back(report: Report) -> list[tuple[str, LessonUse]]:
    """Hypotheses a stored lesson kept out of the beam (component/kind), with the lesson: the
    report shows the refutation the lesson carries in place of evidence it did not gather."""
    return [(what, use) for use in report.lessons_used for what in use.held_back]


def held_back_text(what: str, use: LessonUse) -> tuple[str, str]:
    """(what was not checked, and why) for one hypothesis a lesson held back."""
    component, _, kind = what.partition("/")
    where = f" in {use.source_incident}" if use.source_incident else ""
    refuted = "; ".join(f"{c.observation_id}: {c.value}" for c in use.refutation) or "no refutation recorded"
    return (
        f"{kind} on {component}",
        f"not verified here: lesson {use.lesson_id} lowered it. It was refuted{where} by {refuted}",
    )


def feedback_commands(report: Report) -> list[str]:
    incident = report.incident.id
    return [
        f"opsagent feedback {incident} --correct",
        f"opsagent feedback {incident} --wrong --root-cause SERVICE/KIND",
    ]


def node_label(node: SearchNode) -> str:
    """One hypothesis of the search tree in a line: mark, kind, component, score, verdict."""
    mark = _MARK.get(node.status or "", "·" if not node.verified else "▶")
    text = f"{mark} {node.kind} on {node.component} · score {node.score:.3f}"
    if node.status is not None:
        text += f" · {node.status}"
        if node.stop_reason is not None and node.stop_reason.budget:
            text += f" (stopped: {node.stop_reason.value} budget)"
        elif node.stop_reason is StopReason.no_checks_left and node.status == "inconclusive":
            text += " (no checks left)"
        if node.status == "refuted" and node.reason:
            text += f": {node.reason}"
        text += f" · {len(node.steps)} step(s)"
    elif node.verified:
        text += f" · verifying, {len(node.steps)} step(s)"
    else:
        text += " · not verified"
    return text


def beams(search_round: SearchRound) -> tuple[list[tuple[int, list[SearchNode]]], list[SearchNode]]:
    """A round's verified hypotheses by beam, in order, and those never verified."""
    by_beam: dict[int, list[SearchNode]] = {}
    for node in search_round.nodes:
        if node.beam is not None:
            by_beam.setdefault(node.beam, []).append(node)
    return sorted(by_beam.items()), [n for n in search_round.nodes if n.beam is None]


def beam_title(number: int, earlier: Iterable[SearchNode]) -> str:
    if number == 1:
        return "beam 1"
    decided = [n for n in earlier if n.status is not None]
    if decided and not any(n.status in ("confirmed", "probable") for n in decided):
        return f"beam {number} · backtracking: nothing before it was proven"
    return f"beam {number} · below what was proven"


def triage_line(tree: SearchTree) -> str:
    ranked = ", ".join(f"{c.component} {c.score:.2f}" for c in tree.components) or "nothing stood out"
    sources = ", ".join(s.value for s in tree.sources) or "no source could be read"
    return f"triage: {ranked} (read: {sources})"


def lessons_line(tree: SearchTree) -> str | None:
    if not tree.lessons:
        return None
    shown = "; ".join(
        f"{le.lesson_id} against {le.refuted_kind}" + (f" on {le.component}" if le.component else " (not here)")
        for le in tree.lessons
    )
    return f"lessons recalled: {shown}"


def round_title(search_round: SearchRound) -> str:
    return f"round {search_round.index} · {len(search_round.nodes)} proposed"


# ---------------------------------------------------------------- the search tree, one outline for every view


@dataclass(frozen=True)
class Line:
    """One line of the search tree: its depth, what it says, and what kind of line it is."""

    depth: int
    text: str
    kind: Literal["triage", "lessons", "round", "beam", "waiting", "hypothesis", "note", "step"]
    status: str | None = None


def outline(tree: SearchTree, *, steps: bool = True, triaging: bool = False) -> list[Line]:
    """The search tree as an outline, top to bottom: triage, the lessons recalled, each round with
    its beams in order (later ones backtrack), each hypothesis with what lessons did to it and (with
    ``steps``) the calls its loop made, then the hypotheses never verified."""
    out = [Line(0, "triage: reading every source…" if triaging else triage_line(tree), "triage")]
    recalled = lessons_line(tree)
    if recalled is not None:
        out.append(Line(0, recalled, "lessons"))

    def hypothesis(node: SearchNode, *, waiting: bool) -> None:
        label = node_label(node).removesuffix(" · not verified") if waiting else node_label(node)
        out.append(Line(2, label, "hypothesis", node.status))
        out.extend(Line(3, f"lesson {note}", "note") for note in node.lesson_notes)
        if steps and not waiting:
            out.extend(Line(3, f"{i}. {action}", "step") for i, action in enumerate(node.steps, 1))

    for search_round in tree.rounds:
        out.append(Line(0, round_title(search_round), "round"))
        by_beam, never = beams(search_round)
        earlier: list[SearchNode] = []
        for number, members in by_beam:
            out.append(Line(1, beam_title(number, earlier), "beam"))
            for node in members:
                hypothesis(node, waiting=False)
            earlier.extend(members)
        if never:
            out.append(Line(1, f"not verified ({len(never)})", "waiting"))
            for node in never:
                hypothesis(node, waiting=True)
    return out


def tree_summary(tree: SearchTree) -> str:
    nodes = tree.nodes()
    verified = sum(1 for n in nodes if n.verified)
    return f"{len(tree.rounds)} round(s), {len(nodes)} hypotheses proposed, {verified} verified"


_LINE_STYLE = {"lessons": "magenta", "round": "bold", "waiting": "dim", "note": "magenta", "step": "dim"}


def search_tree(tree: SearchTree, *, title: str = "Search tree", steps: bool = False, triaging: bool = False) -> Tree:
    """The search as a rich Tree; ``steps`` lists each hypothesis's calls (the live view, which
    shows ``triaging`` until triage is done)."""
    root = Tree(Text(title, style="bold"))
    parents = [root]
    for line in outline(tree, steps=steps, triaging=triaging):
        style = _STYLE.get(line.status or "", "") if line.kind == "hypothesis" else _LINE_STYLE.get(line.kind, "")
        del parents[line.depth + 1 :]
        parents.append(parents[line.depth].add(Text(line.text, style=style)))
    return root


# ---------------------------------------------------------------- terminal


def _section(title: str) -> Text:
    return Text(f"\n{title}", style="bold")


def _grid(*ratios: int | None) -> Table:
    """Columns of text; a column with a ratio takes the width left and wraps."""
    grid = Table.grid(padding=(0, 1))
    for ratio in ratios:
        if ratio is None:
            grid.add_column(no_wrap=True)
        else:
            grid.add_column(ratio=ratio, overflow="fold")
    return grid


def _indented(text: str, style: str = "") -> Padding:
    """A paragraph two columns in, wrapped there."""
    return Padding(Text(text, style=style), (0, 0, 0, 2))


def _whole(text: str, style: str = "") -> Text:
    """A URL or a command: printed whole on its line (cut in two, it would open or run nothing)."""
    return Text(text, style=style, no_wrap=True, overflow="ignore")


def renderables(report: Report) -> list[RenderableType]:
    """The terminal report, top to bottom."""
    inc = report.incident
    body: list[RenderableType] = [
        Text(inc.title, style="bold cyan"),
        Text(
            f"incident {inc.id} · services {', '.join(inc.services)} · symptom {inc.symptom.value}\n"
            f"onset {when(inc.onset)}"
            + (f" · alert fired {when(inc.alerted_at)}" if inc.alerted_at else "")
            + f" · strategy {report.strategy}",
            style="dim",
        ),
        Text(f"\n{headline(report)}", style=_STYLE.get(report.status, "bold")),
    ]
    first = first_action(report)
    if first is not None:
        body.append(Text.assemble(("Do first: ", "bold"), first[0]))
        body.append(_indented(f"why: {first[1]}", style="dim"))
    body.extend(Text(line, style="yellow") for line in rival_lines(report))
    body.append(Text(report.statement))
    if report.alerts:
        body.append(_section(f"Alerts joined ({len(report.alerts)})"))
        for name, services, fired, reason, explained in alert_rows(report):
            body.append(Text(f"{fired} {name} on {services}: {reason}"))
            body.append(_indented(f"explained by: {explained}", style="dim"))
    if report.evidence:
        body.append(_section("Evidence"))
        grid = _grid(None, None, 1)
        for e in report.evidence:
            grid.add_row(Text(e.observation_id), Text(e.source.value), Text(e.statement))
        body.append(grid)
    if report.timeline:
        body.append(_section(f"Timeline — {inc.onset:%Y-%m-%d}, UTC"))
        grid = _grid(None, None, 1)
        for t in report.timeline:
            grid.add_row(Text(clock_on(t.ts, inc.onset)), Text(t.kind), Text(t.what))
        body.append(grid)
    kept_out = held_back(report)
    if report.refuted or kept_out:
        body.append(_section("Ruled out"))
        for r in report.refuted:
            body.append(Text(f"{r.hypothesis.kind} on {r.hypothesis.component}", style="red"))
            for e in r.verdict.refuting:
                body.append(_indented(f"refuted by {e.observation_id} ({e.source.value}): {e.statement}"))
        for what, use in kept_out:
            name, why = held_back_text(what, use)
            body.append(Text(name, style="magenta"))
            body.append(_indented(why))
    others = other_results(report)
    if others:
        body.append(_section("Other hypotheses"))
        for r in others:
            body.append(Text(f"{r.hypothesis.kind} on {r.hypothesis.component}: {r.verdict.status}"))
            body.append(_indented(r.verdict.reason, style="dim"))
    if report.search is not None and report.search.rounds:
        body.append(Text(""))
        body.append(search_tree(report.search))
    if report.suspects:
        body.append(_section("Suspects"))
        grid = _grid(None, None, None, None, None)
        grid.add_row(*(Text(h, style="dim") for h in ("#", "component", "kind", "status", "score")))
        whys = _grid(None, 1)
        for i, s in enumerate(report.suspects[:8], 1):
            grid.add_row(Text(str(i)), Text(s.component), Text(s.kind), Text(s.status), Text(f"{s.score:.3f}"))
            if s.why:
                whys.add_row(Text(f"{i}.", style="dim"), Text(s.why, style="dim"))
        body.extend([grid, Text(SUSPECT_ORDER, style="dim"), Text("why:", style="dim"), whys])
    if report.changes:
        body.append(_section("Changes in flight"))
        grid = _grid(None, None, None, None, None, None)
        heads = ("#", "change", "service", "versions", "new version", "score")
        grid.add_row(*(Text(h, style="dim") for h in heads))
        whys = _grid(None, 1)
        for cells in change_rows(report):
            grid.add_row(*(Text(c) for c in cells[:6]))
            if cells[6]:
                whys.add_row(Text(f"{cells[0]}.", style="dim"), Text(cells[6], style="dim"))
        body.extend([grid, Text("why:", style="dim"), whys])
    if report.unreadable_sources:
        body.append(_section("Sources that could not be read"))
        for k, v in report.unreadable_sources.items():
            body.append(_indented(f"{k}: {v}", style="yellow"))
    if any(v.startswith("could not run") for v in report.detectors.values()):
        body.append(_section("Detectors that could not run"))
        for k, v in report.detectors.items():
            if v.startswith("could not run"):
                body.append(_indented(f"{k}: {v}", style="dim"))
    if report.lessons_used:
        body.append(_section("Lessons used"))
        for u in report.lessons_used:
            body.append(
                _indented(f"{u.lesson_id} (relevance {u.relevance:.2f}): {'; '.join(u.effects) or 'no effect'}")
            )
    if report.lessons:
        body.append(_section("Lessons written"))
        for le in report.lessons:
            body.append(_indented(lesson_written(le)))
    if report.plan:
        body.append(_section("Plan"))
        body.extend(Padding(Text(line), (0, 0, 0, 2 + 2 * depth)) for depth, line in plan_outline(report))
    if report.next_steps:
        body.append(_section("Next steps"))
        steps = Table.grid(padding=(0, 1, 0, 0))
        steps.add_column(no_wrap=True)
        steps.add_column(ratio=1, overflow="fold")
        for step in report.next_steps:
            steps.add_row(Text("  -"), Text(step))
        body.append(steps)
    if report.links:
        body.append(_section("Links"))
        for link in report.links:
            body.append(_indented(f"{link.label}:"))
            body.append(_whole(f"    {link.url}", style="blue"))
    model = model_summary(report)
    if model is not None and report.llm is not None:
        notes = len(report.llm.notes)
        more = f" ({notes} note(s); opsagent prompts shows them)" if notes else ""
        body.append(Text("\n" + model + more, style="blue"))
    body.append(Text("\n" + cost_line(report), style="dim"))
    body.append(Text(f"\nincident {inc.id} — was this right? tell opsagent:", style="bold"))
    for command in feedback_commands(report):
        body.append(_whole(f"  {command}"))
    return body


def change_rows(report: Report) -> list[tuple[str, ...]]:
    """The changes in flight as ranked (the first five): number, id, service, versions, what the
    version comparison said of the new version, score, and why."""
    return [
        (
            str(i),
            ch.id,
            ch.service,
            f"{ch.from_version or '?'} -> {ch.to_version or '?'}",
            ch.verdict,
            f"{ch.score:.3f}",
            "; ".join(ch.why),
        )
        for i, ch in enumerate(report.changes[:5], 1)
    ]


def _same(text: str) -> str:
    return text


def plan_outline(
    report: Report, *, text: Callable[[str], str] = _same, code: Callable[[str], str] = _same
) -> list[tuple[int, str]]:
    """The plan (strategy ``plan``) and every re-plan as (depth, line); nothing for other strategies.
    A view passes how it writes prose (``text``: escaped) and names (``code``: the objective, a cited
    observation, a call)."""
    if not report.plan:
        return []
    same = text("(the incident; the same in every revision)")
    out = [(0, f"{text('objective')} {code(report.plan[0].objective)} {same}")]
    for rev in report.plan:
        cited = f" ({code(rev.observation_id)})" if rev.observation_id else ""
        out.append((0, f"{rev.index}. {text(rev.reason)}{cited}"))
        out += [(1, text(f"out: {d}")) for d in rev.dropped] + [(1, text(f"in: {a}")) for a in rev.added]
        out += [
            (1, f"{text(f'{i.kind} on {i.component}: next')} {code(i.next_call or 'none')}, {i.steps_taken} checked")
            for i in rev.items
        ]
    return out


def lesson_written(le: Lesson) -> str:
    return (
        f"{le.id}: when {le.trigger.condition}: {le.refuted_kind} was refuted by "
        f"{'; '.join(c.value for c in le.refuting_evidence)}; next time first run {le.next_action.key()}"
    )


def render(report: Report, console: Console) -> None:
    """The report on a terminal, as text, within the console's width."""
    console.print(Group(*renderables(report)), crop=False)


# ---------------------------------------------------------------- Markdown


def _md(text: str, *, cell: bool = False) -> str:
    """Text in a Markdown line: what Markdown would read as code, emphasis or HTML is escaped
    (and ``|`` in a table cell); ids, names and arrows stay as they are (``db_pool_exhaustion``, ``->``)."""
    out = text
    for ch in "\\`*<" + ("|" if cell else ""):
        out = out.replace(ch, "\\" + ch)
    return out


def search_markdown(tree: SearchTree) -> list[str]:
    """The search tree, collapsed (``<details>``): nested lists, each hypothesis's calls inside."""
    lines = ["<details>", f"<summary>Search: {tree_summary(tree)}</summary>", ""]
    for line in outline(tree):
        text = f"`{line.text}`" if line.kind == "step" else _md(line.text)
        lines.append("  " * line.depth + "- " + (f"**{text}**" if line.kind == "round" else text))
    return [*lines, "", "</details>", ""]


def to_markdown(report: Report) -> str:
    inc = report.incident
    lines = [
        f"# {_md(inc.title)}",
        "",
        f"- incident: `{inc.id}` · services: {_md(', '.join(inc.services))} · symptom: {inc.symptom.value}",
        f"- onset: {when(inc.onset)}"
        + (f" · alert fired: {when(inc.alerted_at)}" if inc.alerted_at else "")
        + f" · strategy: {report.strategy}",
        "",
        f"## {_md(headline(report))}",
        "",
    ]
    first = first_action(report)
    if first is not None:
        lines += [f"**Do first:** {_md(first[0])}", "", f"Why: {_md(first[1])}", ""]
    lines += [f"- {_md(line)}" for line in rival_lines(report)] + ([""] if report.also_proven else [])
    lines += [_md(report.statement), ""]
    if report.alerts:
        lines += [f"## Alerts joined ({len(report.alerts)})", "", "| " + " | ".join(ALERT_HEADS) + " |"]
        lines += ["|" + "---|" * len(ALERT_HEADS)]
        lines += ["| " + " | ".join(_md(cell, cell=True) for cell in row) + " |" for row in alert_rows(report)]
        lines.append("")
    if report.evidence:
        lines += ["## Evidence", ""]
        lines += [f"- `{e.observation_id}` ({e.source.value}) {_md(e.statement)}" for e in report.evidence]
        lines.append("")
    if report.timeline:
        lines += [f"## Timeline — {inc.onset:%Y-%m-%d}, UTC", ""]
        lines += [f"- {clock_on(e.ts, inc.onset)} {e.kind}: {_md(e.what)}" for e in report.timeline]
        lines.append("")
    kept_out = held_back(report)
    if report.refuted or kept_out:
        lines += ["## Ruled out", ""]
        for r in report.refuted:
            cites = "; ".join(f"`{e.observation_id}` {_md(e.statement)}" for e in r.verdict.refuting)
            lines.append(f"- **{_md(r.hypothesis.kind)}** on {_md(r.hypothesis.component)}: {cites}")
        for what, use in kept_out:
            name, why = held_back_text(what, use)
            lines.append(f"- **{_md(name)}**: {_md(why)}")
        lines.append("")
    others = other_results(report)
    if others:
        lines += ["## Other hypotheses", ""]
        lines += [
            f"- {_md(r.hypothesis.kind)} on {_md(r.hypothesis.component)}: {r.verdict.status} ({_md(r.verdict.reason)})"
            for r in others
        ]
        lines.append("")
    if report.search is not None and report.search.rounds:
        lines += ["## Search tree", "", *search_markdown(report.search)]
    lines += ["## Suspects", "", f"_{_md(SUSPECT_ORDER)}_", ""]
    lines += ["| # | component | kind | status | score | why |", "|---|---|---|---|---|---|"]
    for i, s in enumerate(report.suspects[:8], 1):
        cells = (str(i), s.component, s.kind, s.status, f"{s.score:.3f}", s.why)
        lines.append("| " + " | ".join(_md(c, cell=True) for c in cells) + " |")
    lines.append("")
    if report.changes:
        lines += ["## Changes in flight", "", "| # | change | service | versions | new version | score | why |"]
        lines.append("|---|---|---|---|---|---|---|")
        lines += ["| " + " | ".join(_md(c, cell=True) for c in cells) + " |" for cells in change_rows(report)]
        lines.append("")
    if report.unreadable_sources:
        lines += ["## Sources that could not be read", ""]
        lines += [f"- {_md(k)}: {_md(v)}" for k, v in report.unreadable_sources.items()]
        lines.append("")
    if report.detectors:
        lines += ["## Fault-mechanism detectors", ""]
        lines += [f"- {_md(k)}: {_md(v)}" for k, v in report.detectors.items()]
        lines.append("")
    if report.lessons_used:
        lines += ["## Lessons used", ""]
        lines += [
            f"- `{u.lesson_id}` (relevance {u.relevance:.2f}): {_md('; '.join(u.effects) or 'no effect')}"
            for u in report.lessons_used
        ]
        lines.append("")
    if report.lessons:
        lines += ["## Lessons written", ""] + [f"- {_md(lesson_written(le))}" for le in report.lessons] + [""]
    if report.plan:
        lines += ["## Plan", ""]
        outline_md = plan_outline(report, text=_md, code=lambda name: f"`{name}`")
        lines += [("   - " if depth else "") + line for depth, line in outline_md]
        lines.append("")
    if report.next_steps:
        lines += ["## Next steps", ""] + [f"- {_md(s)}" for s in report.next_steps] + [""]
    if report.links:
        lines += ["## Links", ""] + [f"- [{_md(link.label)}](<{link.url}>)" for link in report.links] + [""]
    model = model_summary(report)
    if model is not None and report.llm is not None:
        lines += ["## Model", "", model, ""]
        lines += [f"- {_md(note)}" for note in report.llm.notes]
        lines += [""] if report.llm.notes else []
    lines += [f"_{_md(cost_line(report))}_", ""]
    lines += [f"Incident `{inc.id}`. Was this right? Tell opsagent:", ""]
    lines += [f"    {command}" for command in feedback_commands(report)]
    return "\n".join(lines) + "\n"
