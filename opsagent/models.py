"""Domain models: what an investigation is made of, from the alert to the report.

Every boundary speaks these pydantic models; they serialise straight into JSON reports and
fixtures. Nothing here does I/O.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, field_validator

#: The fault taxonomy. ``truth.kind`` in fixtures and ``kind`` in playbooks come from here.
FAULT_KINDS: tuple[str, ...] = (
    "deploy_regression",
    "config_change",
    "thread_pool_exhaustion",
    "db_pool_exhaustion",
    "slow_query",
    "downstream_latency",
    "cpu_saturation",
    "memory_leak",
    "gc_pause",
    "network_degradation",
    "traffic_surge",
    "code_exception",
    "cache_failure",
    "disk_full",
    "certificate_expiry",
    "dns_failure",
    # Kubernetes: what the cluster itself says went wrong with a workload's pods
    "oom_kill",
    "crash_loop",
    "image_pull_failure",
    "scheduling_failure",
    "probe_failure",
    "unknown",
)


def _known_kind(kind: str) -> str:
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown fault kind {kind!r}; one of: {', '.join(FAULT_KINDS)}")
    return kind


#: A fault kind of the taxonomy, validated wherever one is read (fixtures, playbooks).
FaultKind = Annotated[str, AfterValidator(_known_kind)]

#: Kinds whose cause is a change someone made; they explain the mechanism they trigger.
CHANGE_KINDS: frozenset[str] = frozenset({"deploy_regression", "config_change"})


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SourceKind(StrEnum):
    """Kinds of evidence. Each but ``versions`` is a kind of data source; ``versions`` is the canary
    comparison of a rollout's new version with its old one, read from the metrics source but its own
    kind of evidence: a controlled comparison (same minutes, same traffic, two versions) that a
    before/after shift of the same metrics does not repeat."""

    metrics = "metrics"
    logs = "logs"
    changes = "changes"
    traces = "traces"
    kubernetes = "kubernetes"
    versions = "versions"


#: The kinds of evidence that are kinds of data source (an environment offers them or not).
SOURCE_KINDS: frozenset[SourceKind] = frozenset(k for k in SourceKind if k is not SourceKind.versions)


class Symptom(StrEnum):
    latency = "latency"
    errors = "errors"
    saturation = "saturation"
    availability = "availability"
    traffic = "traffic"
    unknown = "unknown"


class TimeRange(Frozen):
    start: AwareDatetime
    end: AwareDatetime

    @field_validator("end")
    @classmethod
    def _end_after_start(cls, end: datetime, info: Any) -> datetime:
        start = info.data.get("start")
        if start is not None and end <= start:
            raise ValueError("end must be after start")
        return end

    def contains(self, ts: datetime) -> bool:
        return self.start <= ts < self.end

    @property
    def minutes(self) -> float:
        return (self.end - self.start).total_seconds() / 60


# ---------------------------------------------------------------- the trigger


def _zero_time_is_none(v: Any) -> Any:
    # Alertmanager sends 0001-01-01T00:00:00Z for "not ended".
    if isinstance(v, str) and v.startswith("0001-01-01"):
        return None
    return v


def require_labels(labels: dict[str, str]) -> dict[str, str]:
    if not labels:
        raise ValueError("an alert needs at least one label (alertname)")
    return labels


#: The times an investigation can compute with: windows, baselines and Unix nanoseconds (spans)
#: stay representable. Years 0001 or 9999 in an alert are not a time something happened.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2262, 4, 11, tzinfo=UTC)


def possible(when: datetime) -> datetime:
    if not EARLIEST <= when < LATEST:
        raise ValueError(f"{when.isoformat()} is not a possible time for an alert (1970 to 2262)")
    return when


#: A time an alert (or a recording's window) can name: timezone-aware, between 1970 and 2262.
AlertTime = Annotated[AwareDatetime, AfterValidator(possible)]
#: An alert's endsAt: None while it has not ended. Shared by every model of an Alertmanager alert.
AlertEnd = Annotated[AlertTime | None, BeforeValidator(_zero_time_is_none)]


class Alert(BaseModel):
    """An Alertmanager alert object (as in the webhook payload's ``alerts[]``)."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    labels: Annotated[dict[str, str], AfterValidator(require_labels)]
    annotations: dict[str, str] = Field(default_factory=dict)
    starts_at: AlertTime = Field(alias="startsAt")
    ends_at: AlertEnd = Field(default=None, alias="endsAt")
    generator_url: str | None = Field(default=None, alias="generatorURL")
    fingerprint: str | None = None
    status: str | None = None


class JoinedAlert(Frozen):
    """One alert of an alert storm, as the objective lists it (:mod:`opsagent.correlation`)."""

    alertname: str
    services: tuple[str, ...] = Field(description="the services it names; none when it names none")
    nodes: tuple[str, ...] = Field(default=(), description="the nodes it names (node, host… labels)")
    symptom: Symptom
    starts_at: AwareDatetime
    fingerprint: str | None = None
    summary: str = ""
    reason: str = Field(default="", description="why it joined the incident (empty for the alert that opened it)")


class Incident(Frozen):
    """The fixed objective of one investigation. It never changes while hypotheses do."""

    id: str
    title: str
    services: tuple[str, ...]
    symptom: Symptom
    onset: AwareDatetime
    window: TimeRange
    baseline: TimeRange
    labels: dict[str, str] = Field(default_factory=dict)
    alerted_at: AwareDatetime | None = Field(default=None, description="when the alert fired (startsAt)")
    alerts: tuple[JoinedAlert, ...] = Field(
        default=(),
        description="an alert storm: every alert joined into this incident, the one that opened it first; "
        "empty when one alert opened it alone",
    )

    @property
    def service(self) -> str:
        return self.services[0]


# ---------------------------------------------------------------- acting and observing

ArgValue = str | int | float | bool | list[str]


class Action(Frozen):
    """One read-only tool call. ``tool`` is one of the tool layer's names."""

    tool: str
    args: dict[str, ArgValue] = Field(default_factory=dict)

    def key(self) -> str:
        parts = ",".join(f"{k}={self.args[k]!r}" for k in sorted(self.args))
        return f"{self.tool}({parts})"


class CallGap(Frozen):
    """The time a call spends between the two ends of an edge: the caller's client span less the
    callee's server span (the wire, queues in front of the callee's handler), before and after onset."""

    caller: str
    callee: str
    calls_baseline: int
    calls_window: int
    gap_ms_baseline: float = Field(description="median gap of the calls before onset")
    gap_ms_window: float = Field(description="median gap of the calls after onset")
    spread_ms_baseline: float = Field(description="how much the gap varies before onset (scaled MAD)")

    @property
    def shift_ms(self) -> float:
        return self.gap_ms_window - self.gap_ms_baseline


class SeriesStats(Frozen):
    """A metric signal of one component: incident window against its baseline."""

    signal: str
    component: str
    query: str
    unit: str | None = None
    series: int
    baseline_mean: float | None
    baseline_std: float | None
    window_mean: float | None
    window_max: float | None
    peak_ratio: float | None = Field(description="window max / baseline mean")
    mean_ratio: float | None = Field(description="window mean / baseline mean")
    z_score: float | None = Field(description="robust shift of the window against the baseline")
    change_point: AwareDatetime | None
    limit: float | None = None
    limit_fraction: float | None = Field(default=None, description="window max / limit")
    direction: Literal["up", "down", "flat", "unknown"]
    scope: Literal["service", "edge", "node", "outbound"] = Field(
        default="service",
        description="whose figure it is: the component's, a call edge's, its node's, or its outgoing calls'",
    )
    caller: str | None = Field(default=None, description="for an edge series: the calling component")
    side: Literal["client", "server"] | None = Field(
        default=None, description="for an edge series: seen by the caller (client) or by the callee (server)"
    )
    node: str | None = Field(default=None, description="for a node series: the node, or a fingerprint of it")
    peer_surprise: float | None = Field(
        default=None,
        description="share of the metric's deviations before onset, over every component, at least this large",
    )
    brief: Literal["up", "down"] | None = Field(
        default=None,
        description="the way it moved in one sample only after onset, no farther than it had gone before "
        "onset: an excursion the series makes anyway, read as flat",
    )
    held_since: AwareDatetime | None = Field(
        default=None,
        description="since when every sample up to onset has been shifted the way it moved (none where the "
        "last sample before onset was not)",
    )
    gap: CallGap | None = Field(
        default=None,
        description="for the caller's side of a call edge's latency measured at both ends: the caller's "
        "view less the callee's, paired sample by sample (ms; calls_* count the paired samples)",
    )

    @classmethod
    def unmeasured(
        cls, *, signal: str, component: str, query: str, series: int = 1, unit: str | None = None
    ) -> SeriesStats:
        """A series named but not measured: no figures, direction unknown."""
        return cls(
            signal=signal,
            component=component,
            query=query,
            unit=unit,
            series=series,
            baseline_mean=None,
            baseline_std=None,
            window_mean=None,
            window_max=None,
            peak_ratio=None,
            mean_ratio=None,
            z_score=None,
            change_point=None,
            direction="unknown",
        )


class MetricsData(Frozen):
    type: Literal["metrics"] = "metrics"
    stats: list[SeriesStats]


class LogTemplate(Frozen):
    id: str
    template: str
    count: int
    baseline_count: int
    window_count: int
    first_seen: AwareDatetime
    last_seen: AwareDatetime
    levels: list[str]
    services: list[str]
    sample: str
    new: bool
    bursting: bool
    values: list[dict[str, int]] = Field(
        default_factory=list,
        description="most frequent values at each variable position of the template, in order, with exact counts",
    )
    values_partial: list[int] = Field(
        default_factory=list,
        description="variable positions (indexes into values) with more distinct values than were counted",
    )


class LogsData(Frozen):
    type: Literal["logs"] = "logs"
    service: str | None
    total: int
    by_level: dict[str, int]
    by_service: dict[str, int]
    families: dict[str, int] = Field(description="keyword family counts in the incident window")
    baseline_families: dict[str, int]
    templates: list[LogTemplate]
    samples: list[str]
    estimated: bool = Field(default=False, description="template counts come from a sample of the lines")
    window_minutes: float = 0.0
    baseline_minutes: float = 0.0
    templates_total: int = Field(default=0, description="templates mined, listed or not")
    unlisted: int = Field(default=0, description="lines of the templates that are not listed")
    other: LogTemplate | None = Field(
        default=None, description="lines that arrived after the template limit was reached and matched no template"
    )
    vanished: list[LogTemplate] = Field(default_factory=list, description="steady in the baseline, absent after")
    head: list[str] = Field(default_factory=list, description="first lines of the most informative templates")
    tail: list[str] = Field(default_factory=list, description="last lines of the most informative templates")
    histogram_start: AwareDatetime | None = None
    histogram_step_s: float = 0.0
    histogram: list[int] = Field(default_factory=list, description="lines per bucket, baseline and window")
    error_histogram: list[int] = Field(default_factory=list, description="error and fatal lines per bucket")
    outside_range: int = Field(default=0, description="lines in neither the baseline nor the window")
    oddities: dict[str, int] = Field(default_factory=dict, description="malformed or unusual input, by kind")


class RolloutStep(BaseModel):
    """One step of a rollout (a canary's weight raised, a batch of pods replaced): when it completed
    and what it left running. Extra fields a feed sends are kept."""

    model_config = ConfigDict(frozen=True, extra="allow")

    ts: AwareDatetime = Field(description="when the step completed")
    id: str | None = Field(default=None, description="the step's own change id, where a feed records steps as changes")
    index: int | None = Field(default=None, ge=0, description="its number in the rollout's plan (1 = the first)")
    weight: float | None = Field(
        default=None, ge=0, le=100, description="share of the pods or traffic on the new version after it, percent"
    )
    pods: list[str] = Field(default_factory=list, description="pods of the new version it started")
    summary: str | None = None


class ChangeRecord(Frozen):
    """A change in an investigation's range. A rollout carries its steps and the pods of each
    version where the source gives them; steps a feed records as changes of their own are folded
    into the rollout they belong to (:func:`opsagent.analysis.changes.change_records`)."""

    id: str
    ts: AwareDatetime
    end: AwareDatetime | None = None
    service: str
    kind: str
    summary: str
    from_version: str | None = None
    to_version: str | None = None
    author: str | None = None
    diff: str | None = None
    url: str | None = Field(default=None, description="where the change can be read: a commit, a deploy")
    minutes_before_onset: float
    steps: list[RolloutStep] = Field(default_factory=list, description="the rollout's steps, in time order")
    pods: dict[str, list[str]] = Field(default_factory=dict, description="version -> the pods running it")
    notes: list[str] = Field(default_factory=list, description="what the record leaves unknown (no end, missing steps)")

    @property
    def ids(self) -> list[str]:
        """The change's id and its steps' ids: every name the change goes by."""
        return [self.id, *(s.id for s in self.steps if s.id)]


class ChangesData(Frozen):
    type: Literal["changes"] = "changes"
    changes: list[ChangeRecord]
    notes: list[str] = Field(default_factory=list, description="records left out, and why (two with one id)")


class ServiceSpanStats(Frozen):
    service: str
    spans_baseline: int
    spans_window: int
    self_ms_baseline: float | None
    self_ms_window: float | None
    self_shift: float | None = Field(description="window p50 self time / baseline p50 self time")
    total_ms_baseline: float | None
    total_ms_window: float | None
    tail_total_shift: float | None = Field(default=None, description="p90 total time, window / baseline")
    tail_self_shift: float | None = Field(default=None, description="p90 self time, window / baseline")
    errors_baseline: int
    errors_window: int
    origin_errors_baseline: int = Field(default=0, description="error spans with no failing child: errors born here")
    origin_errors_window: int = 0
    fanout_shift: float | None = Field(default=None, description="child calls per span, window / baseline")


class OperationStats(Frozen):
    service: str
    operation: str
    p95_ms: float
    self_p95_ms: float
    count: int


class StepShortfall(Frozen):
    """A component's step whose usual next step went missing after onset (the sharpest one): an
    exception cuts requests short after the step, a wrong branch skips what used to follow it."""

    component: str
    step: str = Field(
        description="the step taken: 'serves <operation>', 'logs <template>', 'calls <service> <operation>'"
    )
    next_step: str = Field(description="what used to follow it")
    reference: Literal["baseline", "before onset"] = Field(description="the spans the shares before onset come from")
    steps_before: int
    share_before: float = Field(description="share of the step followed by next_step before onset")
    steps_after: int
    share_after: float = Field(description="the same share after onset")
    z: float = Field(
        description="how surely the share fell (Fisher's exact test read as a standard-normal z), less the part "
        "a branch took (0: no fall)"
    )
    branched: float = Field(
        default=0.0,
        description="share of the lost successor's place taken by another successor the step already took "
        "before onset (a change in which requests came, not in what the code does): z is discounted by it",
    )


class TracesData(Frozen):
    type: Literal["traces"] = "traces"
    services: list[ServiceSpanStats]
    slowest_operations: list[OperationStats]
    error_spans: dict[str, int]
    blocked_parents: list[str] = Field(
        description="services whose window latency is mostly time spent waiting on callees"
    )
    callers: list[str] = Field(default_factory=list, description="callers of the service asked about")
    callees: list[str] = Field(default_factory=list, description="callees of the service asked about")
    call_gaps: list[CallGap] = Field(
        default_factory=list, description="per call edge: the time between the caller's and the callee's spans"
    )
    step_shortfalls: list[StepShortfall] = Field(
        default_factory=list, description="per component, the step whose usual next step went missing most clearly"
    )


class ContainerState(Frozen):
    """One container of a pod as the kubelet reports it (``status.containerStatuses``)."""

    name: str
    image: str | None = None
    ready: bool = False
    restarts: int = 0
    state: Literal["running", "waiting", "terminated", "unknown"] = "unknown"
    reason: str | None = Field(default=None, description="why it waits or ended: CrashLoopBackOff, ErrImagePull…")
    message: str | None = None
    exit_code: int | None = None
    last_reason: str | None = Field(default=None, description="how the previous run ended: OOMKilled, Error…")
    last_exit_code: int | None = None
    last_finished_at: AwareDatetime | None = None
    last_ran_s: float | None = Field(default=None, description="how long the previous run lasted, in seconds")
    running_since: AwareDatetime | None = Field(default=None, description="when the current run started")
    memory_limit: str | None = Field(default=None, description="resources.limits.memory as written, e.g. 256Mi")


class PodState(Frozen):
    name: str
    namespace: str
    service: str = Field(description="the component the pod rolls up to (its app label, else its owner)")
    node: str | None = None
    phase: str = "Unknown"
    ready: bool = False
    restarts: int = 0
    created: AwareDatetime | None = None
    version: str | None = Field(default=None, description="the revision or image tag the pod runs")
    unschedulable: str | None = Field(default=None, description="why the scheduler could not place it")
    containers: list[ContainerState] = Field(default_factory=list)


class KubeEvent(Frozen):
    """Events of one reason about one object, folded (``count`` occurrences from first to last seen)."""

    type: str
    reason: str
    object: str = Field(description="Kind/name of the object the event is about")
    service: str | None = None
    message: str
    count: int = 1
    first_seen: AwareDatetime | None = None
    last_seen: AwareDatetime | None = None


class NodeState(Frozen):
    name: str
    ready: bool
    problems: list[str] = Field(default_factory=list, description="conditions that are bad: MemoryPressure…")
    unschedulable: bool = False


class WorkloadState(Frozen):
    """The pods of one service, counted."""

    service: str
    namespaces: list[str]
    pods: int
    ready: int
    restarts: int
    terminations: dict[str, int] = Field(default_factory=dict, description="recent ends by reason")
    waiting: dict[str, int] = Field(default_factory=dict, description="containers waiting, by reason")
    pending: int = 0


class KubeFinding(Frozen):
    """A Kubernetes object that is broken and says so (:mod:`opsagent.analysis.kube`): which object,
    what kind of component it is, the field or event that shows it, the fault kind it points to, and
    the services it takes down with it."""

    component: str = Field(description="the suspect to name: the workload, Service, node or namespace")
    component_type: Literal["workload", "service", "node", "namespace"]
    object: str = Field(description="Kind/namespace/name of the broken object")
    sign: str = Field(description="what is broken, as the feature kube:<sign>")
    kind: FaultKind = Field(description="the fault kind the object points to; unknown where none fits")
    why: str
    field: str = Field(description="the field or event that shows it, e.g. status.readyReplicas")
    affects: list[str] = Field(
        default_factory=list, description="services it leaves without a ready pod (none: they still serve)"
    )
    at: AwareDatetime | None = Field(default=None, description="when the object last said so")
    direct: bool = Field(
        default=False,
        description="the field names the fault itself (the scheduler's reason, an image the kubelet cannot "
        "pull, a referenced object the API cannot find, a quota, zero replicas, a selector or port no pod "
        "serves, a node not ready): the judge may confirm on it. False where the finding is read from "
        "logs, inferred from what is absent, or is a symptom other causes give too (a crash loop, a failed "
        "probe)",
    )


class KubernetesData(Frozen):
    """What the Kubernetes API says about a service's pods (or every workload's), their events and nodes,
    as read at ``read_at`` (a live read: now; a recorded incident: when it was recorded)."""

    type: Literal["kubernetes"] = "kubernetes"
    service: str | None
    read_at: AwareDatetime | None = None
    workloads: list[WorkloadState] = Field(default_factory=list)
    pods: list[PodState] = Field(default_factory=list)
    events: list[KubeEvent] = Field(default_factory=list)
    nodes: list[NodeState] = Field(default_factory=list)
    omitted_pods: int = Field(default=0, description="pods of the answer not listed (healthy ones first)")
    unread: list[str] = Field(default_factory=list, description="kinds the API would not list, and why")
    findings: list[KubeFinding] = Field(
        default_factory=list, description="objects that are broken and say so (the whole cluster's read)"
    )


class ErrorData(Frozen):
    type: Literal["error"] = "error"
    error: str
    hint: str | None = None


class VersionComparison(Frozen):
    """One metric of a service, its new version's pods against its old version's, same minutes."""

    metric: str
    meaning: Literal["errors", "latency", "resources", "other"]
    caller: str | None = None
    callee: str | None = None
    side: Literal["client", "server"] | None = None
    unit: str | None = None
    new_median: float
    old_median: float
    new_samples: int
    old_samples: int
    minutes: int = Field(default=0, description="the minutes both versions reported, which were compared")
    p_value: float | None = Field(
        description="two-sided Mann-Whitney U test of the two versions' samples, each minute's aligned on the "
        "old version's median"
    )
    worse: bool = Field(description="the new version is worse the way this metric goes bad, by a margin that counts")


class VersionsData(Frozen):
    """Canary analysis of a service's rollout: do its new version's pods behave like the old ones?"""

    type: Literal["versions"] = "versions"
    service: str
    change_id: str | None = Field(default=None, description="the rollout whose versions were compared, when known")
    new_version: str | None = None
    old_version: str | None = None
    started: AwareDatetime | None = Field(
        default=None, description="when the new version started: its rollout's start, else its first sample"
    )
    since: AwareDatetime | None = Field(default=None, description="the first sample of the new version")
    new_pods: list[str] = Field(default_factory=list)
    old_pods: list[str] = Field(default_factory=list)
    comparisons: list[VersionComparison] = Field(default_factory=list)
    verdict: Literal["worse", "no_worse", "unseen", "unknown"] = Field(
        default="unknown",
        description="worse or no_worse than the old version; unseen: its rollout says it runs, yet it reports nothing",
    )
    reason: str = ""
    notes: list[str] = Field(default_factory=list, description="what could not be compared, and why")

    def worst(self) -> VersionComparison | None:
        """The comparison that decided "worse": errors before latency, then the smallest p-value."""
        bad = [c for c in self.comparisons if c.worse]
        return min(bad, key=lambda c: (c.meaning != "errors", c.p_value or 1.0)) if bad else None


ObservationData = Annotated[
    MetricsData | LogsData | ChangesData | TracesData | KubernetesData | VersionsData | ErrorData,
    Field(discriminator="type"),
]


class Observation(Frozen):
    """What one tool call returned. ``id`` is citable as evidence and derived from the call."""

    id: str
    action: Action
    source: SourceKind | None
    data: ObservationData
    text: str
    tokens: int
    cached: bool = False

    @property
    def ok(self) -> bool:
        return not isinstance(self.data, ErrorData)


# ---------------------------------------------------------------- reasoning


class Hypothesis(Frozen):
    id: str
    component: str
    kind: str
    statement: str
    confirm_if: list[str]
    refute_if: list[str]
    prior: float
    score: float
    playbook: str | None = None
    why: list[str] = Field(default_factory=list)
    explains: list[str] = Field(default_factory=list, description="triage features this hypothesis accounts for")
    consequences: list[str] = Field(default_factory=list, description="fault kinds this fault sets off")
    first_actions: list[Action] = Field(default_factory=list, description="calls lessons say to make first")
    lesson_notes: list[str] = Field(default_factory=list, description="what retrieved lessons changed here")


class Evidence(Frozen):
    observation_id: str
    source: SourceKind
    stance: Literal["supports", "refutes"]
    statement: str
    check: str | None = None


class Step(Frozen):
    """One turn of a ReAct loop: the thought, the call, what came back."""

    index: int
    thought: str
    action: Action | None
    observation_id: str | None
    evidence: list[Evidence] = Field(default_factory=list)
    tokens: int


VerdictStatus = Literal["confirmed", "probable", "refuted", "inconclusive"]


class Verdict(Frozen):
    status: VerdictStatus
    reason: str
    supporting: list[Evidence] = Field(default_factory=list)
    refuting: list[Evidence] = Field(default_factory=list)
    explained: bool = Field(
        default=False,
        description="a verdict the judge would have proven, which the rest of the incident explains away (a "
        "network delay behind the errors, callers' saturation behind the latency): not proven, and its kind "
        "comes after the component's other open kinds",
    )


class StopReason(StrEnum):
    """Why the loop verifying one hypothesis stopped."""

    confirmed = "confirmed"  # the judge ruled: confirmed
    refuted = "refuted"  # the judge ruled: refuted
    steps = "steps"  # budget: the steps allowed per hypothesis were spent
    tokens = "tokens"  # budget: the investigation's tokens were spent
    wall_clock = "wall_clock"  # budget: the investigation's wall clock ran out
    no_checks_left = "no_checks_left"  # the reasoner had nothing more to look at
    search = "search"  # the strategy stopped it: left out of the beam, its tree done, a better branch

    @property
    def budget(self) -> bool:
        """A budget stopped it (not the judge, not the reasoner)."""
        return self in (StopReason.steps, StopReason.tokens, StopReason.wall_clock)


def _legacy_stop_reason(value: Any) -> Any:
    """Reports stored before stop reasons were an enum said them in words."""
    if not isinstance(value, str) or value in StopReason.__members__:
        return value
    words = {"judge: confirmed": "confirmed", "judge: refuted": "refuted", "no checks left": "no_checks_left"}
    if value in words:
        return words[value]
    for unit, reason in (("steps", "steps"), ("tokens", "tokens"), ("wall clock", "wall_clock")):
        if value.startswith("budget exhausted") and value.endswith(unit):
            return reason
    return value


class HypothesisResult(Frozen):
    hypothesis: Hypothesis
    steps: list[Step]
    verdict: Verdict
    stop_reason: Annotated[StopReason, BeforeValidator(_legacy_stop_reason)]
    stop_detail: str = Field(default="", description="the stop reason in words: which budget, at what figure")


class LessonTrigger(Frozen):
    symptom: Symptom
    condition: str = Field(description="the observed signal, template or condition that misled, in words")
    signals: list[str] = Field(
        default_factory=list, description="triage features that made the refuted hypothesis attractive"
    )
    alert: str | None = Field(
        default=None, description="the alert it was learned under, as alertname@service (environment lessons)"
    )


class Citation(Frozen):
    observation_id: str
    value: str


class Lesson(Frozen):
    """What one dead end taught: when the trigger shows, the refuted kind is less likely, and the
    next action is the tool call to make first. ``{service}`` in the action's arguments stands for the
    component the trigger shows on, so a lesson carries over to other services."""

    id: str = ""
    trigger: LessonTrigger
    refuting_evidence: list[Citation] = Field(min_length=1)
    next_action: Action
    refuted_kind: str
    services: list[str]
    source_incident: str
    created_at: AwareDatetime
    seen_in: list[str] = Field(default_factory=list, description="incidents that taught the same lesson")
    count: int = Field(default=1, description="near-duplicates merged into this lesson")
    times_retrieved: int = 0
    times_helped: int = 0
    times_misled: int = Field(
        default=0, description="investigations where the kind it lowered turned out to be the cause (truth, feedback)"
    )
    teaches: Literal["refuted", "usual", "culprit", "noise", "telling", "overturned"] = Field(
        default="refuted",
        description="refuted: a kind refuted under a trigger (ranks hypotheses); usual: evidence this environment "
        "shows on an innocent component (raises what counts as surprising there); culprit: a component that was "
        "the cause behind this alert (a prior on it); noise: a detector (feature) that showed on an innocent "
        "leading suspect, whichever component; telling: a detector the cause showed (noise and "
        "telling together say how far a detector is this environment's everyday noise); overturned: a check that "
        "refuted a kind on the component that was the cause, with that kind (feature ``kind/check``)",
    )
    component: str | None = Field(
        default=None, description="the component a usual or culprit lesson is about (noise, telling: none)"
    )
    feature: str | None = Field(
        default=None, description="usual, noise, telling: the triage feature (detector); overturned: kind/check"
    )
    strength: float | None = Field(
        default=None, description="usual, noise: the strongest it showed while innocent; telling: on the cause"
    )
    environment: list[str] = Field(
        default_factory=list,
        description="the components of the environment it was learned in; an environment lesson acts only where "
        "they are mostly the same",
    )
    last_seen: AwareDatetime | None = Field(
        default=None, description="when an incident last taught it (the latest of its merged near-duplicates)"
    )
    releases: list[str] | None = Field(
        default=None,
        description="a refuted change kind (deploy_regression, config_change): the releases (ReplicaSets) of its "
        "component that were out when it was refuted, empty where none was; it lowers that kind only where one of "
        "them is out again (empty: where none is). None: a lesson about another kind, or a change kind's refutation "
        "learned before lessons named their release (it then suggests its next action and lowers nothing)",
    )

    @property
    def unreliable(self) -> bool:
        """It misled more often than it helped: it no longer ranks hypotheses, only suggests a call."""
        return self.times_misled > self.times_helped


class LessonUse(Frozen):
    """A lesson an investigation retrieved, and what it changed there."""

    lesson_id: str
    relevance: float
    acted: bool = Field(default=False, description="its trigger showed and it changed the investigation")
    effects: list[str] = Field(default_factory=list)
    lowered: list[str] = Field(default_factory=list, description="the hypotheses it lowered, as component/kind")
    held_back: list[str] = Field(
        default_factory=list,
        description="hypotheses it lowered that were never verified here, as component/kind: "
        "the lesson's refutation stands in for evidence this investigation did not gather",
    )
    refuted_kind: str | None = Field(default=None, description="the kind the lesson's incident refuted")
    source_incident: str | None = Field(default=None, description="the incident that taught it")
    refutation: list[Citation] = Field(
        default_factory=list, description="the observations that refuted it there, with their values"
    )
    raised: list[str] = Field(default_factory=list, description="the components whose prior it raised")


# ---------------------------------------------------------------- the search, as a tree


class RankedComponent(Frozen):
    """A component as triage ranked it."""

    component: str
    score: float
    why: str = ""


class RecalledLesson(Frozen):
    """A stored lesson an investigation retrieved."""

    lesson_id: str
    refuted_kind: str
    component: str | None = Field(description="where its trigger shows; None when it shows nowhere here")
    relevance: float


class SearchNode(Frozen):
    """One hypothesis of the search: proposed, perhaps verified, perhaps decided."""

    hypothesis_id: str
    component: str
    kind: str
    score: float
    lesson_notes: list[str] = Field(default_factory=list, description="what retrieved lessons changed here")
    beam: int | None = Field(
        default=None, description="the beam of its round it was verified in (1 first; later ones backtrack)"
    )
    steps: list[str] = Field(default_factory=list, description="the calls its loop made, in order")
    status: VerdictStatus | None = Field(default=None, description="the verdict; None while running, or never verified")
    stop_reason: StopReason | None = None
    reason: str = Field(default="", description="the verdict's reason")

    @property
    def verified(self) -> bool:
        return self.beam is not None


class SearchRound(Frozen):
    """One round of proposals, ranked, in the order the strategy took them."""

    index: int
    nodes: list[SearchNode]


class SearchTree(Frozen):
    """The search an investigation made: triage, the lessons it recalled, each round's candidates,
    the beams they were verified in, and the verdicts. Built from the investigation's events."""

    components: list[RankedComponent] = Field(default_factory=list, description="triage's top components")
    sources: list[SourceKind] = Field(default_factory=list, description="the kinds of source triage could read")
    lessons: list[RecalledLesson] = Field(default_factory=list)
    rounds: list[SearchRound] = Field(default_factory=list)

    def nodes(self) -> list[SearchNode]:
        return [n for r in self.rounds for n in r.nodes]


# ---------------------------------------------------------------- the answer


class Suspect(Frozen):
    component: str
    kind: str
    score: float
    status: VerdictStatus | Literal["unverified"]
    why: str


class AlertExplained(Frozen):
    """One alert of an alert storm, and the cause of the report that accounts for it, if any."""

    alert: JoinedAlert
    cause: str | None = Field(description="component/kind of the cause that explains it; null when none does")
    how: str = Field(description="how that cause reaches the alerting service, or why nothing explains it")


class ProvenRival(Frozen):
    """Another cause proven in the same incident, and how it stands to the root cause: caused by it
    (the root cause accounts for it) or ranked below it, and by what."""

    component: str
    kind: str
    status: VerdictStatus
    relation: Literal["caused_by_root_cause", "ranked_below"] = Field(
        description="caused_by_root_cause: the root cause accounts for it; ranked_below: both stand, the root "
        "cause is favoured"
    )
    why: str = Field(description="the call-graph path, the playbook's consequence, or what the order is by")


class ChangeSuspect(Frozen):
    """A change in flight around onset, ranked by how likely it set the incident off, and why: the
    comparison of its new version with the old, the timing of its steps against onset, and whether
    the alerting service reaches the changed one along the call graph."""

    id: str
    ids: list[str] = Field(description="every name the change goes by: its id and its steps' ids")
    service: str
    kind: str
    from_version: str | None = None
    to_version: str | None = None
    started: AwareDatetime
    ended: AwareDatetime | None = None
    score: float
    status: VerdictStatus | Literal["unverified"] = "unverified"
    verdict: Literal["worse", "no_worse", "unseen", "unknown"] = Field(
        default="unknown", description="what the comparison of its new version with the old said"
    )
    comparison: VersionComparison | None = Field(default=None, description="the figure that decided 'worse'")
    step: int | None = Field(default=None, description="its last move before onset: 0 its start, k its k-th step")
    step_at: AwareDatetime | None = None
    minutes_before_onset: float | None = Field(
        default=None, description="from its last move before onset to onset; None: it moved only after onset"
    )
    reachable: bool = Field(default=True, description="the alerting service reaches the changed one along calls")
    why: list[str] = Field(default_factory=list)
    observation_ids: list[str] = Field(default_factory=list, description="the observations behind it")


class TimelineEvent(Frozen):
    ts: AwareDatetime
    what: str
    kind: Literal["change", "onset", "symptom", "alert"]
    observation_id: str | None = None


class PlanItem(Frozen):
    """One hypothesis of a plan, in the order the plan checks them."""

    hypothesis_id: str
    component: str
    kind: str
    next_call: str | None = Field(description="the call its reasoner makes next for it; None when it has none left")
    steps_taken: int = 0
    expects: list[str] = Field(default_factory=list, description="what the plan assumes the checks will show")


class PlanRevision(Frozen):
    """A plan of checks across hypotheses (``plan``), as made up front or re-made on a surprise. The
    objective it serves is the investigation's incident, locked: ``objective`` is its digest, the same in
    every revision."""

    index: int = Field(description="0 for the plan made up front, then each re-plan in turn")
    reason: str = Field(description="why it was made: up front, or the surprise that contradicted the plan")
    observation_id: str | None = Field(default=None, description="the observation that contradicted the plan")
    objective: str = Field(description="digest of the incident the plan answers")
    items: list[PlanItem]
    dropped: list[str] = Field(default_factory=list, description="hypotheses taken out of the plan, with why")
    added: list[str] = Field(default_factory=list, description="hypotheses the re-plan brought in")


class Link(Frozen):
    """A way out of the report to the system that holds the detail."""

    kind: Literal["alert", "runbook", "series", "silence", "change"]
    label: str
    url: str
    observation_id: str | None = Field(default=None, description="the cited observation it opens, if any")


class Cost(BaseModel):
    steps: int = 0
    tool_calls: int = 0
    cache_hits: int = 0
    tokens: int = 0
    wall_ms: float = 0.0


# ---------------------------------------------------------------- what a model was told (LLM reasoner)


class PromptToolCall(Frozen):
    """A tool call as a chat-completions message carries it: arguments are the JSON text."""

    id: str
    name: str
    arguments: str


class PromptMessage(Frozen):
    """One chat message exactly as sent to (or received from) a model, after redaction."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[PromptToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None


class ModelExchange(Frozen):
    """One request to a model and its reply: what it was told, what it said, what it cost."""

    index: int
    purpose: Literal["propose", "repair", "act", "reflect"]
    hypothesis_id: str | None = None
    request: list[PromptMessage] = Field(description="the messages sent, after redaction")
    tools: list[str] = Field(default_factory=list, description="names of the tools offered")
    reply: PromptMessage | None = None
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usage_estimated: bool = Field(default=False, description="the server reported no usage: tokens are estimated")
    attempts: int = 1
    latency_ms: float = 0.0
    redactions: int = Field(default=0, description="secrets masked in this request before it was sent")
    error: str | None = None


class ModelUsage(BaseModel):
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated_calls: int = Field(default=0, description="calls whose usage the server did not report")
    cost_usd: float | None = Field(default=None, description="from the price table; None when the model has no price")


class ModelRecord(BaseModel):
    """The LLM reasoner's part of an investigation: model, spending, every exchange, and what fell back."""

    model: str
    base_url: str
    mode: str = Field(description="tools (native tool calling) or text (Thought/Action/Final)")
    usage: ModelUsage = Field(default_factory=ModelUsage)
    exchanges: list[ModelExchange] = Field(default_factory=list)
    notes: list[str] = Field(
        default_factory=list, description="fallbacks to the playbook reasoner, rejected output, refused calls"
    )
    fallbacks: int = Field(default=0, description="times the playbook reasoner stood in for the model")
    budget_exhausted: str | None = Field(
        default=None, description="why the model stopped being asked: a call the token or time budget could not afford"
    )


class LessonEffect(Frozen):
    """What an environment lesson did to one component's evidence or prior in triage."""

    lesson_id: str
    component: str
    effect: Literal["lowered", "raised", "held", "reopened"] = Field(
        description="held: it would have lowered the feature, but another lesson contradicts it; or raised the"
        " component, but a broken object of this incident takes it down; reopened: a refutation by a check that"
        " refuted the same kind on the same component when it was the cause is not taken as settled"
    )
    feature: str | None = Field(default=None, description="lowered, held: the feature it is about")
    before: float = Field(description="the feature's magnitude, or the component's score, before")
    after: float
    why: str


class Situation(Frozen):
    """What an investigation saw, as lessons learn from it (replay truth, an engineer's feedback) and
    are retrieved by: the alert, the symptom, the environment's components, and the evidence (triage
    features, with magnitude and the observation behind each) of the leading suspects."""

    alert: str = Field(description="alertname@service")
    symptom: Symptom
    components: list[str] = Field(description="every component the investigation knew of")
    evidence: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="component -> triage feature -> magnitude, for the leading suspects"
    )
    observations: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="component -> triage feature -> the observation id behind it"
    )
    releases: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="component -> the release (a ReplicaSet: one build of its pod template) its new version's pods"
        " ran in this incident -> the observation that shows them",
    )


#: The JSON report's schema version (opsagent/data/report.schema.json). Raised when a field is
#: removed, renamed or changes meaning; a field added with a default leaves it as it is.
REPORT_SCHEMA_VERSION = 1


class Report(BaseModel):
    """One investigation's answer: what ``investigate --json`` prints and the store keeps."""

    schema_version: int = Field(
        default=REPORT_SCHEMA_VERSION, description="the version of this format (docs/cli.md, JSON report)"
    )
    incident: Incident
    strategy: str
    status: Literal["confirmed", "probable", "inconclusive"]
    root_cause: Suspect | None
    statement: str
    confidence: float
    evidence: list[Evidence]
    timeline: list[TimelineEvent]
    results: list[HypothesisResult]
    suspects: list[Suspect]
    lessons: list[Lesson]
    lessons_used: list[LessonUse] = Field(default_factory=list)
    situation: Situation | None = Field(
        default=None, description="what the investigation saw, as lessons learn from it (opsagent.environment)"
    )
    unreadable_sources: dict[str, str] = Field(default_factory=dict)
    detectors: dict[str, str] = Field(
        default_factory=dict,
        description="per fault-mechanism detector (opsagent.mechanisms): what it ran over, or why it could not run",
    )
    budget_exhausted: str | None = Field(default=None, description="which budget stopped the investigation")
    next_steps: list[str] = Field(default_factory=list)
    also_proven: list[ProvenRival] = Field(
        default_factory=list, description="the other causes proven here, and how each stands to the root cause"
    )
    change: ChangeSuspect | None = Field(default=None, description="the change the verdict names, when one caused it")
    changes: list[ChangeSuspect] = Field(default_factory=list, description="the changes in flight, most likely first")
    cost: Cost
    observations: list[Observation] = Field(default_factory=list)
    llm: ModelRecord | None = Field(default=None, description="the model's prompts, replies and cost")
    plan: list[PlanRevision] = Field(
        default_factory=list, description="the plan of checks and every re-plan (strategy plan); empty otherwise"
    )
    search: SearchTree | None = Field(default=None, description="the search as a tree: rounds, beams, verdicts")
    links: list[Link] = Field(
        default_factory=list,
        description="the alert's source, its runbook, each cited series, a silence, each cited change",
    )
    alerts: list[AlertExplained] = Field(
        default_factory=list,
        description="an alert storm: per alert joined into the incident, the cause that explains it or that none does",
    )

    @property
    def refuted(self) -> list[HypothesisResult]:
        return [r for r in self.results if r.verdict.status == "refuted"]
