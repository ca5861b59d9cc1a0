"""Playbooks: YAML knowledge of fault kinds, validated into models, and the expectation vocabulary.

A playbook says when a fault kind applies (symptoms, triage features it requires and features that
make it likelier), its prior, how to state it, and its checks: a tool call plus what result would
confirm it and what would refute it. Expectations come from the fixed vocabulary below, implemented
here in Python: a playbook cannot run code. A broken playbook is a :class:`PlaybookError` naming
the file and the field.
"""

from __future__ import annotations

import fnmatch
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal, get_args

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from opsagent import kubestate
from opsagent.analysis.changes import last_move_before
from opsagent.analysis.edges import SLOW_LINKS_SHARE, Links, links_of
from opsagent.analysis.gaps import calls_into, gap_grew
from opsagent.errors import PlaybookError, Problem
from opsagent.logsummary import FAMILIES
from opsagent.models import (
    ArgValue,
    CallGap,
    ChangeRecord,
    ChangesData,
    FaultKind,
    Incident,
    KubernetesData,
    LogsData,
    LogTemplate,
    MetricsData,
    Observation,
    SeriesStats,
    ServiceSpanStats,
    Symptom,
    TracesData,
    VersionsData,
)
from opsagent.observations import fmt, times
from opsagent.stats import shortfall_ratio
from opsagent.tools import TOOLS
from opsagent.yamltext import load_yaml


def _known_family(family: str) -> str:
    if family not in FAMILIES:
        raise ValueError(f"unknown log family {family!r}; one of: {', '.join(FAMILIES)}")
    return family


LogFamily = Annotated[str, AfterValidator(_known_family)]
ChangeKind = Literal["deploy", "rollout", "config", "flag", "infra", "scale"]

PLACEHOLDERS = frozenset({"service", "symptom", "alert_service", "service_pattern"})

#: Words that say little about which system a name means ("stripe-api" is "stripe").
_GENERIC_NAME_PARTS = frozenset({"api", "service", "svc", "server", "app", "backend", "srv"})


def service_pattern(service: str) -> str:
    """A regex that finds a service where logs name it loosely: "stripe-api" matches api.stripe.com."""
    parts = [p for p in re.split(r"[-_.]", service) if p]
    core = [p for p in parts if p.lower() not in _GENERIC_NAME_PARTS]
    options = [re.escape(service)]
    if core and core != parts:
        options.append(r"[-_. ]?".join(re.escape(p) for p in core))
    return "|".join(options)


def placeholder_values(service: str, symptom: str, alert_service: str) -> dict[str, str]:
    return {
        "service": service,
        "symptom": symptom,
        "alert_service": alert_service,
        "service_pattern": service_pattern(service),
    }


Op = Literal[
    "increased",
    "decreased",
    "unchanged",
    "near_limit",
    "below_limit",
    "shifted_near_onset",
    "below_value",
    "above_value",
    "component_quiet",
    "family_burst",
    "family_quiet",
    "new_errors",
    "no_new_errors",
    "change_before_onset",
    "no_change_before_onset",
    "change_mentions",
    "self_time_up",
    "self_time_flat",
    "errors_up",
    "waiting_on_callees",
    "fanout_up",
    "callers_fanout_up",
    "terminated",
    "waiting",
    "pending",
    "not_ready",
    "kube_event",
    "node_pressure",
    "pods_steady",
    "object_broken",
    "version_worse",
    "version_no_worse",
    "version_unseen",
    "links_slow",
    "links_fine",
    "calls_in_slow",
]

_TOOL_OF_OP: dict[str, tuple[str, ...]] = {
    "metrics": (
        "increased",
        "decreased",
        "unchanged",
        "near_limit",
        "below_limit",
        "shifted_near_onset",
        "below_value",
        "above_value",
        "component_quiet",
        "version_worse",
        "version_no_worse",
        "version_unseen",
        "links_slow",
        "links_fine",
    ),
    "logs": ("family_burst", "family_quiet", "new_errors", "no_new_errors"),
    "changes": ("change_before_onset", "no_change_before_onset", "change_mentions"),
    "traces": (
        "self_time_up",
        "self_time_flat",
        "errors_up",
        "waiting_on_callees",
        "fanout_up",
        "callers_fanout_up",
        "calls_in_slow",
    ),
    "kubernetes": (
        "terminated",
        "waiting",
        "pending",
        "not_ready",
        "kube_event",
        "node_pressure",
        "pods_steady",
        "object_broken",
    ),
}


class Expectation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    op: Op
    min_ratio: float = 1.5
    max_ratio: float = 0.7
    tolerance: float = 1.3
    fraction: float | None = None
    value: float = 0.0
    within_min: float = 45.0
    family: LogFamily | None = None
    exclude: list[LogFamily] = Field(default_factory=list, description="log families that disqualify a template")
    own: bool = Field(
        default=False,
        description="only errors of the component's own making: none of the families that name a dependency's "
        "or a resource's failure (NOT_OWN_FAMILIES)",
    )
    min_count: int = 5
    kinds: list[ChangeKind] = Field(default_factory=lambda: list(get_args(ChangeKind)))
    pattern: str | None = None
    min_shift: float = 1.5
    max_shift: float = 1.3
    reasons: list[str] = Field(
        default_factory=list, description="Kubernetes reasons: OOMKilled, CrashLoopBackOff, FailedScheduling…"
    )

    @field_validator("pattern")
    @classmethod
    def _valid_regex(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from exc
        return pattern

    @model_validator(mode="after")
    def _needs(self) -> Expectation:
        if self.op in ("family_burst", "family_quiet") and self.family is None:
            raise ValueError(f"{self.op} needs a family")
        if self.op == "change_mentions" and self.pattern is None:
            raise ValueError("change_mentions needs a pattern")
        return self

    def source(self) -> str:
        return next(kind for kind, ops in _TOOL_OF_OP.items() if self.op in ops)


class Check(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    tool: str
    args: dict[str, ArgValue] = Field(default_factory=dict)
    says: str = Field(description="the thought behind the check, in words")
    confirm: Expectation | None = None
    refute: Expectation | None = None
    refute_unless: list[str] = Field(
        default_factory=list,
        description="triage features (patterns) of the component before which the refutation does not stand: a "
        "mechanism proved against the whole incident outweighs one reading that does not show it",
    )

    @model_validator(mode="after")
    def _coherent(self) -> Check:
        if self.tool not in TOOLS:
            raise ValueError(f"unknown tool {self.tool!r}; one of: {', '.join(TOOLS)}")
        if self.confirm is None and self.refute is None:
            raise ValueError("a check needs confirm, refute or both")
        source = self.tool.split(".")[0]
        for exp in (self.confirm, self.refute):
            if exp is not None and exp.source() != source:
                raise ValueError(f"expectation {exp.op!r} reads {exp.source()}, but the tool is {self.tool}")
        for value in self.args.values():
            _check_placeholders(str(value))
        _check_placeholders(self.says)
        return self


class Applies(BaseModel):
    model_config = ConfigDict(extra="forbid")

    symptoms: list[Symptom] = Field(default_factory=list, description="empty: any symptom")
    requires: list[str] = Field(default_factory=list, description="feature patterns that must all be present")
    requires_any: list[str] = Field(default_factory=list, description="at least one must be present")
    unless: list[str] = Field(
        default_factory=list,
        description="feature patterns that name a more specific cause of what this playbook covers: with any "
        "present, it does not apply (a container that exits on a name it cannot resolve is a DNS fault, not a "
        "crash loop)",
    )
    indicators: dict[str, float] = Field(default_factory=dict, description="feature pattern -> weight")
    role: Literal["any", "downstream", "origin"] = Field(
        default="any",
        description="downstream: only components the alerting service calls (a dependency's fault), never "
        "itself; origin: where a wave starts, a component none of whose callers shows what it requires "
        "(a traffic surge enters at the edge), wherever it sits in the graph",
    )


class Playbook(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    kind: FaultKind
    title: str
    prior: float = Field(gt=0, le=1)
    applies: Applies
    statement: str
    checks: list[Check] = Field(min_length=2)
    consequences: list[FaultKind] = Field(
        default_factory=list, description="fault kinds this fault sets off (slow queries starve a connection pool)"
    )
    keywords: list[str] = Field(
        default_factory=list,
        description="words that, in a change's summary or diff, say the change touched this mechanism",
    )
    source_file: str | None = Field(default=None, exclude=True)

    @field_validator("kind")
    @classmethod
    def _a_known_fault(cls, kind: str) -> str:
        if kind == "unknown":
            raise ValueError("a playbook names the fault it proves; 'unknown' is for truths only")
        return kind

    @field_validator("statement")
    @classmethod
    def _statement_fields(cls, statement: str) -> str:
        _check_placeholders(statement)
        return statement

    @model_validator(mode="after")
    def _unique_checks(self) -> Playbook:
        ids = [c.id for c in self.checks]
        if len(ids) != len(set(ids)):
            raise ValueError("check ids must be unique within a playbook")
        return self

    def explained(self, features: dict[str, float]) -> list[str]:
        """The component's features this playbook's conditions account for."""
        patterns = [*self.applies.requires, *self.applies.requires_any, *self.applies.indicators]
        return sorted(f for f in features if any(fnmatch.fnmatchcase(f, p) for p in patterns))

    def match(self, features: dict[str, float], symptom: Symptom) -> float | None:
        """How well this playbook fits a component's triage features; None when it does not apply."""
        if self.applies.symptoms and symptom != Symptom.unknown and symptom not in self.applies.symptoms:
            return None
        if not all(_present(pattern, features) for pattern in self.applies.requires):
            return None
        if self.applies.requires_any and not any(_present(p, features) for p in self.applies.requires_any):
            return None
        if any(_present(p, features) for p in self.applies.unless):
            return None
        total = sum(self.applies.indicators.values()) or 1.0
        hit = sum(w for p, w in self.applies.indicators.items() if _present(p, features))
        return hit / total


def _present(pattern: str, features: dict[str, float]) -> bool:
    return any(fnmatch.fnmatchcase(f, pattern) for f in features)


def _check_placeholders(template: str) -> None:
    for _, name, _, _ in string.Formatter().parse(template):
        if name is not None and name not in PLACEHOLDERS:
            raise ValueError(f"unknown placeholder {{{name}}}; allowed: {', '.join(sorted(PLACEHOLDERS))}")


def fill(template: str, values: dict[str, str]) -> str:
    return template.format(**values)


# ---------------------------------------------------------------- loading


def load_playbooks(directory: Path) -> list[Playbook]:
    problems: list[Problem] = []
    books: list[Playbook] = []
    files = sorted(directory.glob("*.yaml")) + sorted(directory.glob("*.yml"))
    if not files:
        raise PlaybookError([Problem(str(directory), "no playbooks (*.yaml) found")])
    for path in files:
        try:
            raw = load_yaml(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            mark = getattr(exc, "problem_mark", None)
            problems.append(Problem(str(path), f"cannot parse: {exc}", line=mark.line + 1 if mark else None))
            continue
        try:
            book = Playbook.model_validate(raw)
        except ValidationError as exc:
            for err in exc.errors():
                loc = ".".join(str(p) for p in err["loc"]) or "(playbook)"
                problems.append(Problem(str(path), err["msg"], field=loc))
            continue
        books.append(book.model_copy(update={"source_file": str(path)}))
    seen: dict[str, str] = {}
    for book in books:
        if book.id in seen:
            problems.append(
                Problem(
                    book.source_file or "?", f"duplicate playbook id {book.id!r} (also in {seen[book.id]})", field="id"
                )
            )
        seen[book.id] = book.source_file or "?"
    if problems:
        raise PlaybookError(problems)
    return books


# ---------------------------------------------------------------- the expectation vocabulary


@dataclass(frozen=True)
class Outcome:
    """Whether an expectation held (None: the data cannot say) and the value that decided it."""

    met: bool | None
    value: str


@dataclass(frozen=True)
class Context:
    incident: Incident
    service: str
    #: the canary analysis of the service's rollout, where one was made: what its old version's pods
    #: show cannot clear a new version that reports nothing
    versions: VersionsData | None = None


def context_for(incident: Incident, service: str, observations: Mapping[str, Observation]) -> Context:
    """The context of expectations about a service, with the last canary analysis made of it."""
    compared = [o.data for o in observations.values() if isinstance(o.data, VersionsData) and o.data.service == service]
    return Context(incident=incident, service=service, versions=compared[-1] if compared else None)


Evaluator = Callable[[Expectation, Observation, Context], Outcome]
_UNKNOWN = Outcome(None, "no data")


def _stats(obs: Observation) -> SeriesStats | None:
    if isinstance(obs.data, MetricsData) and obs.data.stats:
        return obs.data.stats[0]
    return None


def _ratio_text(s: SeriesStats) -> str:
    ratio = times(s.mean_ratio)
    return f"{s.signal} {fmt(s.baseline_mean, s.unit)} -> {fmt(s.window_mean, s.unit)} ({ratio})"


def _increased(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    s = _stats(obs)
    if s is None or s.mean_ratio is None:
        return _UNKNOWN
    return Outcome(s.direction == "up" and s.mean_ratio >= exp.min_ratio, _ratio_text(s))


def _decreased(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    s = _stats(obs)
    if s is None or s.mean_ratio is None:
        return _UNKNOWN
    return Outcome(s.direction == "down" and s.mean_ratio <= exp.max_ratio, _ratio_text(s))


def _unchanged(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    s = _stats(obs)
    if s is None or s.mean_ratio is None:
        return _UNKNOWN
    flat = s.direction == "flat" and 1 / exp.tolerance <= s.mean_ratio <= exp.tolerance
    return Outcome(flat, _ratio_text(s) + (" flat" if flat else ""))


def _limit_text(s: SeriesStats) -> str:
    if s.limit is None or s.limit_fraction is None:
        return f"{s.signal}: no limit known"
    peak = s.limit_fraction * s.limit
    return f"{s.signal} peaked at {fmt(peak)}/{fmt(s.limit)} ({s.limit_fraction:.0%} of its limit)"


def _near_limit(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    s = _stats(obs)
    if s is None or s.limit_fraction is None:
        return _UNKNOWN
    return Outcome(s.limit_fraction >= (exp.fraction or 0.9), _limit_text(s))


def _below_limit(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    s = _stats(obs)
    if s is None or s.limit_fraction is None:
        return _UNKNOWN
    return Outcome(s.limit_fraction < (exp.fraction or 0.5), _limit_text(s))


def _shifted_near_onset(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    s = _stats(obs)
    if s is None or s.change_point is None:
        return _UNKNOWN
    gap = abs((s.change_point - ctx.incident.onset).total_seconds()) / 60
    moved = s.direction in ("up", "down")
    return Outcome(moved and gap <= exp.within_min, f"{s.signal} shifted {s.direction} at {s.change_point:%H:%M}")


def _below_value(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    s = _stats(obs)
    if s is None or s.window_mean is None:
        return _UNKNOWN
    return Outcome(
        s.window_mean <= exp.value, f"{s.signal} at {fmt(s.window_mean, s.unit)} (threshold {fmt(exp.value, s.unit)})"
    )


def _above_value(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    s = _stats(obs)
    if s is None or s.window_mean is None:
        return _UNKNOWN
    return Outcome(
        s.window_mean >= exp.value, f"{s.signal} at {fmt(s.window_mean, s.unit)} (threshold {fmt(exp.value, s.unit)})"
    )


def _component_quiet(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    """Met when the component has series and none of them moved the bad way by x``min_ratio``."""
    if not isinstance(obs.data, MetricsData):
        return _UNKNOWN
    if ctx.versions is not None and ctx.versions.verdict == "unseen":
        return Outcome(
            None, f"{ctx.versions.new_version} of {ctx.service} reports nothing: its quiet old pods say nothing of it"
        )
    mine = [s for s in obs.data.stats if s.component == ctx.service]
    if not mine:
        return _UNKNOWN
    moved = [s for s in mine if s.direction in ("up", "down") and _moved_by(s, exp.min_ratio)]
    if moved:
        return Outcome(False, "; ".join(_ratio_text(s) for s in moved[:3]))
    return Outcome(True, f"none of the {len(mine)} series of {ctx.service} moved beyond x{exp.min_ratio:g}")


def moved_ratio(s: SeriesStats) -> float | None:
    """How many times a series moved: a series that fell from its ceiling (a success rate) by how many
    times its shortfall grew (99.9% -> 76% is two hundred times the failures, not x0.76), else its ratio."""
    shortfall = shortfall_ratio(s.baseline_mean, s.window_mean, s.unit) if s.direction == "down" else None
    return shortfall or s.mean_ratio


def _moved_by(s: SeriesStats, ratio: float) -> bool:
    """Whether a series moved by ``ratio`` either way (:func:`moved_ratio`)."""
    moved = moved_ratio(s)
    return moved is not None and (moved >= ratio or moved <= 1 / ratio)


def _versions(obs: Observation, ctx: Context) -> VersionsData | None:
    data = obs.data
    return data if isinstance(data, VersionsData) and data.service == ctx.service else None


def _version_worse(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    """Met when the service's new version fails more, or is slower by a margin, than its old one, and
    it was running when the symptom began (a version that started after onset did not cause it)."""
    data = _versions(obs, ctx)
    if data is None or data.verdict in ("unknown", "unseen"):
        return Outcome(None, data.reason if data else "no versions compared")
    text = f"{data.new_version} against {data.old_version}: {data.reason}"
    if data.verdict == "worse" and not running_at_onset(data, ctx.incident):
        return Outcome(False, f"{text}; but {data.new_version} started after the onset")
    return Outcome(data.verdict == "worse", text)


def _version_no_worse(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    """Met when the new version has run long enough and none of its error or latency figures is worse."""
    data = _versions(obs, ctx)
    if data is None or data.verdict in ("unknown", "unseen"):
        return Outcome(None, data.reason if data else "no versions compared")
    return Outcome(data.verdict == "no_worse", f"{data.new_version} against {data.old_version}: {data.reason}")


def _version_unseen(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    """Met when the rollout says the new version runs, yet its pods report nothing while the old's do."""
    data = _versions(obs, ctx)
    if data is None or data.verdict == "unknown":
        return Outcome(None, data.reason if data else "no versions compared")
    return Outcome(data.verdict == "unseen", data.reason)


#: A new version's first sample trails its pods' start by a scrape interval, and an onset is known to
#: the minute: a version first seen this many minutes after onset was running at onset.
STARTED_SLACK_MIN = 2.0


def running_at_onset(data: VersionsData, incident: Incident) -> bool:
    started = data.started or data.since
    return started is None or (started - incident.onset).total_seconds() / 60 <= STARTED_SLACK_MIN


def _links(obs: Observation, ctx: Context) -> Links | None:
    if not isinstance(obs.data, MetricsData):
        return None
    links = links_of(obs.data, ctx.service)
    return links if links.measured else None


def _links_text(links: Links) -> str:
    slow = "; ".join(
        f"{e.caller}->{e.callee} x{e.client.mean_ratio:.1f} seen by the caller, x{(e.server.mean_ratio or 1):.1f} by "
        "the callee"
        for e in links.slow[:3]
    )
    return f"{len(links.slow)} of {links.measured} measured links of {links.component} slow between the ends" + (
        f": {slow}" if slow else ""
    )


def _links_slow(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    """Met when most of the component's links measured from both ends slowed between the ends."""
    links = _links(obs, ctx)
    if links is None:
        return _UNKNOWN
    return Outcome(bool(links.slow) and links.share >= SLOW_LINKS_SHARE, _links_text(links))


def _links_fine(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    """Met when none of the component's links measured from both ends slowed between the ends."""
    links = _links(obs, ctx)
    if links is None:
        return _UNKNOWN
    return Outcome(not links.slow, _links_text(links))


def _logs(obs: Observation) -> LogsData | None:
    return obs.data if isinstance(obs.data, LogsData) else None


def family_counts(family: str, data: LogsData, incident: Incident) -> tuple[int, float]:
    """Lines of a family after onset, and how many the baseline's rate would have written then."""
    window_min = max((incident.window.end - incident.onset).total_seconds() / 60, 1.0)
    scale = window_min / max(incident.baseline.minutes, 1.0)
    return data.families.get(family, 0), data.baseline_families.get(family, 0) * scale


def _family_burst(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    data = _logs(obs)
    if data is None:
        return _UNKNOWN
    n, expected = family_counts(exp.family or "", data, ctx.incident)
    text = f"{n} '{exp.family}' lines after onset (baseline rate ~{expected:.0f})"
    return Outcome(n >= exp.min_count and n >= 3 * max(expected, 1.0), text)


def _family_quiet(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    data = _logs(obs)
    if data is None or data.total == 0:
        return _UNKNOWN
    n, expected = family_counts(exp.family or "", data, ctx.incident)
    return Outcome(n < max(exp.min_count, 2 * expected), f"{n} '{exp.family}' lines after onset")


#: Log families that name a failure of something else than the component's own code: a dependency
#: (a timeout, a refused or reset connection, an HTTP 5xx from a callee, TLS, DNS, auth, a rate limit)
#: or a resource (a pool, memory, disk).
NOT_OWN_FAMILIES = (
    "timeout",
    "refused",
    "unavailable",
    "reset",
    "pool",
    "tls",
    "dns",
    "oom",
    "disk",
    "5xx",
    "auth",
    "ratelimit",
)


def new_error_templates(data: LogsData, family: str | None = None, exclude: Sequence[str] = ()) -> list[LogTemplate]:
    """Error templates that are new against the baseline or bursting above its rate (of a family,
    and of none of the excluded families, when given)."""
    out = []
    for t in data.templates:
        if (t.new or t.bursting) and set(t.levels) & {"error", "fatal"}:
            pattern = FAMILIES.get(family) if family else None
            if pattern is not None and not pattern.search(t.sample):
                continue
            if any(FAMILIES[f].search(t.sample) for f in exclude):
                continue
            out.append(t)
    return out


def _excluded(exp: Expectation) -> list[str]:
    return sorted(set(exp.exclude) | (set(NOT_OWN_FAMILIES) if exp.own else set()))


def _listed(templates: list[LogTemplate]) -> list[str]:
    return [f"[{t.id}] x{t.window_count} {t.template}" for t in templates]


def _new_errors(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    data = _logs(obs)
    if data is None:
        return _UNKNOWN
    found = _listed(new_error_templates(data, exp.family, _excluded(exp)))
    none = "no new or bursting error templates" + (f" of family {exp.family}" if exp.family else "")
    return Outcome(bool(found), "new or bursting error templates: " + "; ".join(found[:2]) if found else none)


def _no_new_errors(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    data = _logs(obs)
    if data is None or data.total == 0:
        return _UNKNOWN
    found = _listed(new_error_templates(data, exp.family, _excluded(exp)))
    none = "no new or bursting error templates" + (f" of family {exp.family}" if exp.family else "")
    if exp.own:
        none += " of its own making"
    return Outcome(not found, none if not found else "; ".join(found[:2]))


def qualifying_changes(exp: Expectation, obs: Observation, ctx: Context) -> list[ChangeRecord] | None:
    if not isinstance(obs.data, ChangesData):
        return None
    out = []
    onset = ctx.incident.onset
    for c in obs.data.changes:
        if c.service != ctx.service or c.kind not in exp.kinds:
            continue
        moved = last_move_before(c, onset)  # its start, or the last of its steps, before onset
        if moved is None:
            continue  # it began after the symptom did
        in_progress = c.end is not None and c.end >= onset
        if (onset - moved[1]).total_seconds() / 60 <= exp.within_min or in_progress:
            out.append(c)
    return out


def diff_lines(diff: str) -> list[str]:
    """The changed lines of a unified diff (or the whole text when it is not one)."""
    lines = [ln.strip() for ln in diff.splitlines() if ln.strip()]
    changed = [f"{ln[0]} {ln[1:].strip()}" for ln in lines if ln[0] in "+-" and not ln.startswith(("+++", "---"))]
    return changed or lines


def change_text(c: ChangeRecord, onset: datetime | None = None) -> str:
    versions = f" {c.from_version} -> {c.to_version}" if c.to_version else ""
    diff = f"; diff: {' | '.join(diff_lines(c.diff)[:6])}" if c.diff else ""
    steps = f"; {len(c.steps)} step(s)" if c.steps else ""
    moved = last_move_before(c, onset) if onset is not None and c.steps else None
    if moved is not None and moved[0] > 0:
        steps += f", step {moved[0]} at {moved[1]:%H:%M} the last before onset"
    return (
        f"[{c.id}] {c.kind} {c.service}{versions}: {c.summary}{diff}{steps} "
        f"({c.minutes_before_onset:.0f} min before onset)"
    )


def _change_before_onset(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    found = qualifying_changes(exp, obs, ctx)
    if found is None:
        return _UNKNOWN
    return Outcome(
        bool(found),
        change_text(found[-1], ctx.incident.onset) if found else f"no {'/'.join(exp.kinds)} change to {ctx.service}",
    )


def _no_change_before_onset(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    found = qualifying_changes(exp, obs, ctx)
    if found is None:
        return _UNKNOWN
    return Outcome(
        not found,
        f"no {'/'.join(exp.kinds)} change to {ctx.service} within {exp.within_min:.0f} min before onset"
        if not found
        else change_text(found[-1], ctx.incident.onset),
    )


def _change_mentions(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    found = qualifying_changes(exp, obs, ctx)
    if found is None:
        return _UNKNOWN
    pattern = re.compile(exp.pattern or "", re.I)
    hits = [c for c in found if pattern.search(f"{c.summary}\n{c.diff or ''}")]
    return Outcome(
        bool(hits),
        change_text(hits[-1], ctx.incident.onset) if hits else f"no change to {ctx.service} mentions /{exp.pattern}/",
    )


def _span_stats(obs: Observation, ctx: Context) -> ServiceSpanStats | None:
    if not isinstance(obs.data, TracesData):
        return None
    return next((s for s in obs.data.services if s.service == ctx.service), None)


#: The share of a component's measured callers whose calls into it must have slowed.
CALLERS_SHARE = 0.5


def _calls_in(obs: Observation, ctx: Context) -> tuple[list[CallGap], float] | None:
    """The measured calls into the component, and how much its own outbound calls slowed (ms)."""
    if not isinstance(obs.data, TracesData):
        return None
    inbound, own_out = calls_into(obs.data.call_gaps, ctx.service)
    return (inbound, own_out) if inbound else None


def _calls_in_text(inbound: list[CallGap], own_out: float, ctx: Context) -> str:
    top = max(inbound, key=lambda g: (g.shift_ms, g.caller))
    slowed = sum(1 for g in inbound if gap_grew(g, own_out))
    return (
        f"{slowed} of {len(inbound)} callers' calls into {ctx.service} slowed between the ends; the most, from "
        f"{top.caller}: {fmt(top.gap_ms_baseline)} -> {fmt(top.gap_ms_window)} ms; its own outbound calls "
        f"{own_out:+.0f} ms"
    )


def _calls_in_slow(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    """Met when calls into the component lost time between the ends (the caller's client span less
    the component's server span) beyond their own spread, more than its own outbound calls did."""
    found = _calls_in(obs, ctx)
    if found is None:
        return _UNKNOWN
    inbound, own_out = found
    # From most of its measured callers: one slow caller alone (a caller starved of CPU reads its
    # answers late) does not place the delay at the component.
    slowed = sum(1 for g in inbound if gap_grew(g, own_out))
    return Outcome(slowed > 0 and slowed >= CALLERS_SHARE * len(inbound), _calls_in_text(inbound, own_out, ctx))


#: The least rise of a component's own time per request that can make anything slow, in ms (the
#: smallest latency change that counts: opsagent.analysis.series.UNIT_MIN_EFFECT): 2 -> 3.4 ms is x1.7,
#: and no caller, let alone a user, notices it.
SELF_TIME_MIN_MS = 5.0


def _self_time_up(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    s = _span_stats(obs, ctx)
    if s is None or s.self_shift is None:
        return _UNKNOWN
    text = f"{ctx.service} self time {times(s.self_shift)} ({fmt(s.self_ms_baseline)} -> {fmt(s.self_ms_window)} ms)"
    rise = (s.self_ms_window or 0.0) - (s.self_ms_baseline or 0.0)
    return Outcome(s.self_shift >= exp.min_shift and rise >= SELF_TIME_MIN_MS, text)


def _self_time_flat(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    s = _span_stats(obs, ctx)
    if s is None or s.self_shift is None:
        return _UNKNOWN
    return Outcome(s.self_shift <= exp.max_shift, f"{ctx.service} self time x{s.self_shift:.2f}")


def _errors_up(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    s = _span_stats(obs, ctx)
    if s is None:
        return _UNKNOWN
    base_rate = s.origin_errors_baseline / max(s.spans_baseline, 1)
    rate = s.origin_errors_window / max(s.spans_window, 1)
    text = f"{ctx.service} error spans born in it {s.origin_errors_baseline} -> {s.origin_errors_window}"
    return Outcome(s.origin_errors_window >= 3 and rate >= 3 * base_rate + 0.01, text)


def _callers_fanout_up(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    """Callers of the service make more calls per request (cache misses fall through to the store)."""
    if not isinstance(obs.data, TracesData) or not obs.data.callers:
        return _UNKNOWN
    shifts = {s.service: s.fanout_shift for s in obs.data.services if s.service in obs.data.callers}
    up = {k: v for k, v in shifts.items() if v is not None and v >= exp.min_shift}
    if not any(v is not None for v in shifts.values()):
        return _UNKNOWN
    text = ", ".join(f"{k} x{v:.2f} calls per request" for k, v in up.items()) or "callers' calls per request unchanged"
    return Outcome(bool(up), text)


def _fanout_up(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    s = _span_stats(obs, ctx)
    if s is None or s.fanout_shift is None:
        return _UNKNOWN
    return Outcome(s.fanout_shift >= exp.min_shift, f"{ctx.service} makes x{s.fanout_shift:.2f} calls per request")


def _waiting_on_callees(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    if not isinstance(obs.data, TracesData):
        return _UNKNOWN
    waiting = ctx.service in obs.data.blocked_parents
    return Outcome(waiting, f"{ctx.service} {'is' if waiting else 'is not'} mostly waiting on callees")


# ---------------------------------------------------------------- Kubernetes (rules in opsagent.kubestate)


def _kube(obs: Observation) -> KubernetesData | None:
    return obs.data if isinstance(obs.data, KubernetesData) else None


def _with_pods(obs: Observation, ctx: Context) -> KubernetesData | None:
    """The cluster's answer when it lists pods of the service: without any, it cannot say."""
    data = _kube(obs)
    return data if data is not None and any(p.service == ctx.service for p in data.pods) else None


def _since(exp: Expectation, ctx: Context) -> datetime:
    """Ends and events count from this long before onset: the check's own within_min when it sets one,
    else the same horizon triage uses."""
    within = exp.within_min if "within_min" in exp.model_fields_set else kubestate.RECENT_MIN
    return kubestate.since_onset(ctx.incident.onset, within)


def _signs_found(found: list[str], none: str) -> Outcome:
    more = f" (+{len(found) - 2} more)" if len(found) > 2 else ""
    return Outcome(bool(found), "; ".join(found[:2]) + more if found else none)


def _terminated(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    data = _with_pods(obs, ctx)
    if data is None:
        return _UNKNOWN
    reasons = exp.reasons or list(kubestate.OOM)
    found = kubestate.ended(data, ctx.service, reasons, _since(exp, ctx), onset=ctx.incident.onset)
    return _signs_found(found, f"no container of {ctx.service} ended {'/'.join(reasons)} since before onset")


def _waiting(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    data = _with_pods(obs, ctx)
    if data is None:
        return _UNKNOWN
    found = kubestate.waiting(data, ctx.service, exp.reasons or list(kubestate.CRASHING))
    return _signs_found(found, f"no container of {ctx.service} waiting for {'/'.join(exp.reasons)}")


def _pending(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    data = _with_pods(obs, ctx)
    if data is None:
        return _UNKNOWN
    return _signs_found(kubestate.unscheduled(data, ctx.service), f"every pod of {ctx.service} is scheduled")


def _not_ready(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    data = _with_pods(obs, ctx)
    if data is None:
        return _UNKNOWN
    return _signs_found(kubestate.not_ready(data, ctx.service), f"every running container of {ctx.service} is ready")


def _object_broken(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    """An object of the component (its workload, or the node or namespace it names) is broken and says
    so, with one of the signs asked for (any, when none is named); None when the read lists no broken
    object at all (a read of one service's pods, which the analyzers do not run over)."""
    data = _kube(obs)
    if data is None or not data.findings:
        return _UNKNOWN
    found = [
        f"{f.object}: {f.why} ({f.field})"
        for f in data.findings
        if f.component == ctx.service and (not exp.reasons or f.sign in exp.reasons)
    ]
    return _signs_found(found, f"no broken object of {ctx.service}")


def _kube_event(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    data = _kube(obs)
    if data is None:
        return _UNKNOWN
    pattern = re.compile(exp.pattern, re.I) if exp.pattern else None
    events = kubestate.events_about(data, ctx.service, exp.reasons, _since(exp, ctx), pattern)
    found = [f"{e.reason} {e.object} x{e.count}: {e.message[:160]}" for e in events]
    return _signs_found(found, f"no {'/'.join(exp.reasons) or 'matching'} events about {ctx.service}")


def _node_pressure(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    data = _kube(obs)
    if data is None or not data.nodes:
        return _UNKNOWN
    return _signs_found(kubestate.node_problems(data, ctx.service), f"the nodes {ctx.service} runs on are healthy")


def _pods_steady(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    data = _with_pods(obs, ctx)
    if data is None:
        return _UNKNOWN
    steady = kubestate.steady(data, ctx.service, _since(exp, ctx))
    return Outcome(True, steady) if steady else Outcome(False, f"pods of {ctx.service} restarted, waiting or unready")


EVALUATORS: dict[str, Evaluator] = {
    "increased": _increased,
    "decreased": _decreased,
    "unchanged": _unchanged,
    "near_limit": _near_limit,
    "below_limit": _below_limit,
    "shifted_near_onset": _shifted_near_onset,
    "below_value": _below_value,
    "above_value": _above_value,
    "component_quiet": _component_quiet,
    "version_worse": _version_worse,
    "version_no_worse": _version_no_worse,
    "version_unseen": _version_unseen,
    "links_slow": _links_slow,
    "links_fine": _links_fine,
    "family_burst": _family_burst,
    "family_quiet": _family_quiet,
    "new_errors": _new_errors,
    "no_new_errors": _no_new_errors,
    "change_before_onset": _change_before_onset,
    "no_change_before_onset": _no_change_before_onset,
    "change_mentions": _change_mentions,
    "calls_in_slow": _calls_in_slow,
    "self_time_up": _self_time_up,
    "self_time_flat": _self_time_flat,
    "errors_up": _errors_up,
    "waiting_on_callees": _waiting_on_callees,
    "fanout_up": _fanout_up,
    "callers_fanout_up": _callers_fanout_up,
    "terminated": _terminated,
    "waiting": _waiting,
    "pending": _pending,
    "not_ready": _not_ready,
    "kube_event": _kube_event,
    "node_pressure": _node_pressure,
    "pods_steady": _pods_steady,
    "object_broken": _object_broken,
}


def evaluate(exp: Expectation, obs: Observation, ctx: Context) -> Outcome:
    if not obs.ok:
        return Outcome(None, obs.text)
    return EVALUATORS[exp.op](exp, obs, ctx)
