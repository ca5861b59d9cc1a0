"""A log summary as text, under a token budget, highest information first.

What is chosen, in order, while it fits: the headline counts and any note that something is
estimated; one line for each new or bursting error template, then each other error template, then
each warning template; the keyword families; the values and a whole example line of the first
templates; one line for each remaining template; what vanished; the rate histogram; the first and
last lines that matter. What is chosen is then printed in a fixed layout, every template line led by
its citable id (``[t1a2b3c4d]``). A line is shown whole or not at all; the text never exceeds the
budget as :func:`opsagent.tokens.estimate_tokens` counts it, and it ends by saying how much
was left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from opsagent.logsummary.summary import MAX_VALUES
from opsagent.models import LogsData, LogTemplate
from opsagent.tokens import estimate_tokens

DEFAULT_BUDGET_TOKENS = 600
#: Templates that get their values and a whole example line, when the budget allows.
DETAILED = 3


@dataclass(frozen=True, slots=True)
class _Item:
    priority: int
    place: tuple[int, int, int]  # where it prints: section, template rank, line within the template
    text: str
    template: str | None = None  # the id of the template the line is about


def render(d: LogsData, *, budget_tokens: int = DEFAULT_BUDGET_TOKENS) -> str:
    ranked = _ranked(d)
    left_out_at_most = _omitted_line(d, ranked, shown=set())
    chosen: list[_Item] = []
    text = ""
    for item in sorted(_items(d, ranked), key=lambda item: (item.priority, item.place)):
        if item.place[2] > 0 and not any(c.template == item.template and c.place[2] == 0 for c in chosen):
            continue  # details only under a template line that is shown
        candidate = f"{text}\n{item.text}" if text else item.text
        if estimate_tokens(f"{candidate}\n{left_out_at_most}") <= budget_tokens:
            chosen.append(item)
            text = candidate
    shown = {c.template for c in chosen if c.template is not None}
    lines = [c.text for c in sorted(chosen, key=lambda c: c.place)]
    if len(shown) < d.templates_total + (d.other is not None):
        lines.append(_omitted_line(d, ranked, shown))
    out = "\n".join(lines)
    while lines and estimate_tokens(out) > budget_tokens:  # a budget too small even for the headline
        lines.pop()
        out = "\n".join(lines)
    return out


def _omitted_line(d: LogsData, ranked: list[LogTemplate], shown: set[str]) -> str:
    hidden = d.templates_total + (d.other is not None) - len(shown)
    lines = d.unlisted + sum(t.count for t in ranked if t.id not in shown)
    return f"… {hidden} more templates ({lines} lines) not shown"


def _ranked(d: LogsData) -> list[LogTemplate]:
    """Listed templates (already in information order), then the "other" bucket."""
    return [*d.templates, *([d.other] if d.other is not None else [])]


def _items(d: LogsData, ranked: list[LogTemplate]) -> list[_Item]:
    window_lines = sum(d.by_level.values())
    items = [
        _Item(
            0,
            (0, 0, 0),
            f"logs of {d.service or 'all services'}: {window_lines} lines after onset"
            + (" (" + ", ".join(f"{k}={v}" for k, v in d.by_level.items()) + ")" if d.by_level else "")
            + f", {d.total - window_lines} in baseline; {d.templates_total} templates;"
            " [id] level xN/M: N lines after onset, M in baseline",
        )
    ]
    notes = []
    if d.estimated:
        notes.append("template counts are estimated from a sample of the lines")
    if d.other is not None:
        notes.append(f"{d.other.count} lines matched no template once the template limit was reached ([other])")
    if notes:
        items.append(_Item(0, (0, 1, 0), "note: " + "; ".join(notes)))
    if d.families:
        families = ", ".join(f"{k}={v}/{d.baseline_families.get(k, 0)}" for k, v in d.families.items())
        items.append(_Item(5, (0, 2, 0), f"families xN/M: {families}"))
    if d.oddities:
        items.append(_Item(9, (0, 3, 0), "input oddities: " + ", ".join(f"{k}={v}" for k, v in d.oddities.items())))
    for rank, t in enumerate(ranked):
        worst = t.levels[0] if t.levels else "unknown"
        novel = t.new or t.bursting
        priority = (1 if novel else 2) if worst in ("fatal", "error") else 4 if worst == "warn" else 7 if novel else 8
        items.append(_Item(priority, (1, rank, 0), _template_line(t), t.id))
        if rank < DETAILED and t.id != "other":
            values = _values(t)
            if values:
                items.append(_Item(3, (1, rank, 1), f"    values: {values}", t.id))
            items.append(_Item(6, (1, rank, 2), f"    e.g. {_first_line(t.sample)}", t.id))
    for i, t in enumerate(d.vanished):
        items.append(_Item(10, (2, i, 0), f"vanished [{t.id}] x0/{t.baseline_count}: {t.template}"))
    if d.histogram and d.histogram_start is not None:
        errors = f" | errors: {' '.join(map(str, d.error_histogram))}" if any(d.error_histogram) else ""
        items.append(
            _Item(
                11,
                (3, 0, 0),
                f"lines per {d.histogram_step_s / 60:g} min from {d.histogram_start:%H:%M}: "
                f"{' '.join(map(str, d.histogram))}{errors}",
            )
        )
    for i, line in enumerate(d.head):
        items.append(_Item(12, (4, i, 0), f"first: {_first_line(line)}"))
    for i, line in enumerate(d.tail):
        items.append(_Item(12, (5, i, 0), f"last: {_first_line(line)}"))
    return items


def _template_line(t: LogTemplate) -> str:
    flags = "NEW " if t.new else "BURST " if t.bursting else ""
    since = f" {t.first_seen:%H:%M:%S}-{t.last_seen:%H:%M:%S}" if t.new or t.bursting else ""
    services = ",".join(t.services[:2]) + ("…" if len(t.services) > 2 else "")
    return f"[{t.id}] {flags}{'/'.join(t.levels)} x{t.window_count}/{t.baseline_count}{since} {services}: {t.template}"


def _values(t: LogTemplate, positions: int = 3, per_position: int = 3) -> str:
    """Variable positions whose values repeat first (they tell events apart); an id that differs on
    every line says little beyond an example."""
    ranked = sorted((max(v.values()) == 1, len(v), i) for i, v in enumerate(t.values) if v)[:positions]
    parts = []
    for unique, _, i in sorted(ranked, key=lambda r: r[2]):
        values = list(t.values[i].items())
        if unique and t.count > 1:
            parts.append(f"#{i + 1} differs on every line, e.g. {_short(values[0][0])}")
            continue
        top = values[:per_position]
        text = ", ".join(f"{_short(v)} x{n}" for v, n in top)
        hidden = t.count - sum(n for _, n in top)
        if hidden > 0:
            text += f", +{hidden} other"
        if i in t.values_partial:
            text += f" (the first {MAX_VALUES} distinct values counted)"
        parts.append(f"#{i + 1} {text}")
    return "; ".join(parts)


def _short(value: str, limit: int = 60) -> str:
    # a value is not a line: long ones (a URL, a stack frame) are shortened, marked with an ellipsis
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _first_line(message: str) -> str:
    first, _, rest = message.partition("\n")
    more = rest.count("\n") + 1 if rest else 0
    return first + (f" (+{more} more lines)" if more else "")
