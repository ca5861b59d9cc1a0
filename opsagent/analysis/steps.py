"""Steps a component stopped taking: the expected next step of its requests, from traces and logs.

Each span of a component is a short sequence of steps: the operation it serves, the log lines it
writes (by span id) and the calls it makes, in time order. In code that works, what follows a step is
nearly fixed (the controller's line is followed by the service's line, the call to the price service
by the line that prices the trip). A code fault removes expected behaviour: an exception cuts the
request short, so a step that used to follow another now rarely does, while the step before it still
happens. Comparing the share of a step's successors before and after onset does not depend on how
much traffic came, only on what the code did with it; the step counts come from the incident.

A component's callers' spans change too (they log the failure instead of their next step), but the
component's own broken transition is usually the sharpest one: the fault-mechanism detector
(:mod:`opsagent.mechanisms`) judges each component's sharpest shortfall against the other components
of the same incident. Pure functions; no I/O.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from opsagent.fixtures import Span, unix
from opsagent.logsummary.masking import Masker
from opsagent.logsummary.mining import TemplateMiner
from opsagent.models import Incident, StepShortfall

#: A step seen fewer times than this before onset (or after) says nothing about what follows it.
MIN_STEPS = 3
#: A successor expected fewer times than this after onset cannot be missed measurably.
MIN_EXPECTED = 3.0
#: An alert fires once its condition has held for its pending period (Prometheus' ``for:``, commonly a
#: minute), so the requests the fault changed began about that much before the alert's start: spans
#: from then on count as after onset.
ALERT_LEAD_S = 60.0
#: A successor is a step's usual one when it followed the step at least this often before onset: only
#: what the code used to do can go missing (a successor that followed now and then says which requests
#: came, the traffic mix).
USUAL = 0.5
#: Two lines are one log statement when this share of their tokens agree: values printed by one
#: statement vary in a token or two, while different statements of one class (masked line numbers
#: alike) differ in most of their words. Stricter than the summariser's grouping, which gathers lines
#: for a reader rather than telling a program's steps apart.
STATEMENT_SIMILARITY = 0.8
#: Where a span's steps end. (Which step comes *first* is not counted: among log lines without their
#: span's operation it says which requests came, the traffic mix, not what the code did with them.)
END = "(end)"


@dataclass(frozen=True, slots=True)
class StepLine:
    """One log line of a span: when, whose, which span, and its template (variables masked)."""

    ts: float
    service: str
    span_id: str
    template: str


def step_lines(records: Iterable[tuple[float, str, str, str]]) -> list[StepLine]:
    """Log lines ``(ts, service, span id, message)`` as steps: each message by the template it joins
    among its component's lines (mined Drain-style, so a statement that prints a varying value is one
    step, not one per value)."""
    masker = Masker()
    miners: dict[str, TemplateMiner] = {}
    joined: list[tuple[float, str, str, int | None]] = []
    for ts, service, span_id, message in records:
        miner = miners.get(service)
        if miner is None:
            miner = miners[service] = TemplateMiner(similarity=STATEMENT_SIMILARITY)
        template, _ = miner.add(masker.tokens(message)[0])
        joined.append((ts, service, span_id, template.index if template is not None else None))
    texts: dict[str, list[str]] = {}
    for service, miner in miners.items():
        roots = miner.merged()
        texts[service] = [miner.templates[r].text for r in roots]
    return [
        StepLine(ts=ts, service=service, span_id=span_id, template=texts[service][i] if i is not None else "(other)")
        for ts, service, span_id, i in joined
    ]


def _sequences(spans: Sequence[Span], lines: Iterable[StepLine]) -> dict[str, tuple[str, float, list[str]]]:
    """Per span id: its component, when it began, and its steps in order."""
    events: dict[str, list[tuple[float, int, str]]] = defaultdict(list)
    owner: dict[str, tuple[str, float]] = {}
    # One label string per operation, call and template, shared by every span that takes the step (a
    # large recording has hundreds of thousands of spans and a few hundred distinct steps).
    serves: dict[str, str] = {}
    calls: dict[tuple[str, str], str] = {}
    logs: dict[str, str] = {}
    for s in spans:
        t = s.start_s
        op = s.operation
        served = serves.get(op) or serves.setdefault(op, f"serves {op}")
        events[s.span_id].append((t, 0, served))
        owner[s.span_id] = (s.service, t)
        if s.parent_id:
            key = (s.service, op)
            call = calls.get(key) or calls.setdefault(key, f"calls {s.service} {op}")
            events[s.parent_id].append((t, 2, call))
    for line in lines:
        logged = logs.get(line.template) or logs.setdefault(line.template, f"logs {line.template}")
        events[line.span_id].append((line.ts, 1, logged))
        if line.span_id not in owner:
            owner[line.span_id] = (line.service, line.ts)
    out: dict[str, tuple[str, float, list[str]]] = {}
    for span_id, evs in events.items():
        if span_id not in owner:  # a parent outside the recording: its calls alone are not its steps
            continue
        evs.sort()
        service, began = owner[span_id]
        out[span_id] = (service, began, [*(e[2] for e in evs), END])
    return out


def _calls_another(step: str, service: str) -> bool:
    """Whether the step is a call to another component: what follows it is that component's answer (an
    error it returned cuts the caller's request short), not the caller's code."""
    return step.startswith("calls ") and step.split(" ", 2)[1] != service


def step_shortfalls(spans: Sequence[Span], lines: Iterable[StepLine], *, incident: Incident) -> list[StepShortfall]:
    """Per component, the step whose expected successor went missing most clearly after onset.

    Before onset is the incident's baseline where the step was taken often enough there, else the spans
    between the window's start and onset (as for call gaps); onset is the alert's start less its pending
    period (ALERT_LEAD_S). The measure is a two-proportion z: how far the share of the step followed by
    its usual successor fell, in standard errors of both counts. A component whose compared steps lost
    nothing gets a shortfall of 0 (it ran, and found none); one whose steps are always followed by the
    same next step, before and after, has nothing to compare and is not listed."""
    b0, b1 = unix(incident.baseline.start), unix(incident.baseline.end)
    w0, w1 = unix(incident.window.start), unix(incident.window.end)
    onset = max(unix(incident.onset) - ALERT_LEAD_S, w0)
    pairs: dict[str, dict[str, Counter[tuple[str, str]]]] = {
        p: defaultdict(Counter) for p in ("baseline", "pre", "after")
    }
    seen: dict[str, dict[str, Counter[str]]] = {p: defaultdict(Counter) for p in ("baseline", "pre", "after")}
    for service, began, steps in _sequences(spans, lines).values():
        if onset <= began < w1:
            period = "after"
        elif b0 <= began < b1:
            period = "baseline"
        elif w0 <= began < onset:
            period = "pre"
        else:
            continue
        for a, b in pairwise(steps):
            pairs[period][service][(a, b)] += 1
            seen[period][service][a] += 1
    out: list[StepShortfall] = []
    for service in sorted(seen["after"]):
        after_seen, after_pairs = seen["after"][service], pairs["after"][service]
        best: StepShortfall | None = None
        for step in sorted(after_seen):
            if _calls_another(step, service):
                continue
            period = "baseline" if seen["baseline"][service][step] >= MIN_STEPS else "pre"
            n1, n2 = seen[period][service][step], after_seen[step]
            if n1 < MIN_STEPS or n2 < MIN_STEPS:
                continue
            for (a, nxt), c1 in sorted(pairs[period][service].items()):
                # Only the step's usual successor can go missing, and the end of the span never does: a
                # fault that cuts requests short ends them sooner; a span no longer ending there does more.
                if a != step or nxt == END or c1 / n1 < USUAL or n2 * c1 / n1 < MIN_EXPECTED:
                    continue
                c2 = after_pairs[(step, nxt)]
                pooled = (c1 + c2) / (n1 + n2)
                if pooled >= 1.0:  # followed every time before and after: nothing to compare
                    continue
                z = (c1 / n1 - c2 / n2) / math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
                if best is None or z > best.z:
                    best = StepShortfall(
                        component=service,
                        step=step,
                        next_step=nxt,
                        reference="baseline" if period == "baseline" else "before onset",
                        steps_before=n1,
                        share_before=round(c1 / n1, 4),
                        steps_after=n2,
                        share_after=round(c2 / n2, 4),
                        z=round(max(z, 0.0), 3),
                    )
        if best is not None:
            out.append(best)
    return out
