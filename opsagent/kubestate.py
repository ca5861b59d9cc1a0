"""Kubernetes objects, read: what the cluster says about a service's pods, their events and nodes,
the rollout history of its Deployments and Argo Rollouts as changes, and the rules that decide
what of it is evidence.

The live reader (:mod:`adapters.kubernetes.reader`) and a recorded incident hand over the same raw API
objects (:class:`opsagent.fixtures.KubeObject`); everything computed from them is here, so a replay
and a live read of the same cluster say the same thing. The rules at the end (:func:`ended`,
:func:`waiting`, :func:`events_about`, …) are the single definition of each Kubernetes sign: the
playbooks' expectations call them (:mod:`opsagent.playbooks`), and triage's ``kube:`` features are
those expectations (:mod:`opsagent.features`).
Nothing here does I/O.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from opsagent.fixtures import Change, KubeObject
from opsagent.models import ContainerState, KubeEvent, KubernetesData, NodeState, PodState, WorkloadState

#: Pod labels that name the service a pod belongs to, tried in order (then its owner's name).
SERVICE_LABELS = ("app.kubernetes.io/name", "app", "k8s-app", "service", "app.kubernetes.io/instance")
#: An end or event this long before onset (minutes) still belongs to the incident.
RECENT_MIN = 30.0
#: How many pods and events one observation lists (troubled ones first).
MAX_PODS = 20
MAX_EVENTS = 30

OOM = ("OOMKilled",)
CRASHING = ("CrashLoopBackOff", "RunContainerError", "CreateContainerError", "StartError")
BAD_EXIT = ("Error", "ContainerCannotRun", "StartError", "DeadlineExceeded")
IMAGE_PULL = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
PROBE = re.compile(r"(liveness|readiness|startup) probe (failed|errored)", re.I)
_NODE_PROBLEMS = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
_HASH = re.compile(r"-[a-z0-9]{8,10}$")  # a ReplicaSet's pod-template-hash suffix
_POD_SUFFIX = re.compile(r"-[a-z0-9]{5}$")
_REVISION = ("deployment.kubernetes.io/revision", "rollout.argoproj.io/revision")
_TEMPLATE_HASH = ("pod-template-hash", "rollouts-pod-template-hash")


def replicaset_of(pod: str) -> str | None:
    """The ReplicaSet a Deployment's pod belongs to, read from the pod's name (``<replicaset>-<5 chars>``,
    the ReplicaSet ending in its pod-template hash): one build of one pod template. None where the name
    is not of that shape (a StatefulSet's ``redis-0``, a bare pod)."""
    if not _POD_SUFFIX.search(pod):
        return None
    rs = _POD_SUFFIX.sub("", pod)
    return rs if _HASH.search(rs) else None


# ---------------------------------------------------------------- the parts of the API objects read


class _View(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class _Terminated(_View):
    reason: str | None = None
    message: str | None = None
    exitCode: int | None = None
    startedAt: AwareDatetime | None = None
    finishedAt: AwareDatetime | None = None


class _Waiting(_View):
    reason: str | None = None
    message: str | None = None


class _Running(_View):
    startedAt: AwareDatetime | None = None


class _State(_View):
    running: _Running | None = None
    waiting: _Waiting | None = None
    terminated: _Terminated | None = None


class _ContainerStatus(_View):
    name: str
    image: str | None = None
    ready: bool = False
    restartCount: int = 0
    state: _State = Field(default_factory=_State)
    lastState: _State = Field(default_factory=_State)


class _Condition(_View):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    lastUpdateTime: AwareDatetime | None = None
    lastTransitionTime: AwareDatetime | None = None


class _PodStatus(_View):
    phase: str = "Unknown"
    conditions: list[_Condition] = Field(default_factory=list)
    containerStatuses: list[_ContainerStatus] = Field(default_factory=list)


class _Resources(_View):
    limits: dict[str, str] = Field(default_factory=dict)
    requests: dict[str, str] = Field(default_factory=dict)


class _Container(_View):
    name: str
    image: str | None = None
    resources: _Resources = Field(default_factory=_Resources)


class _PodSpec(_View):
    nodeName: str | None = None
    containers: list[_Container] = Field(default_factory=list)


class _Ref(_View):
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None


class _Series(_View):
    count: int | None = None
    lastObservedTime: AwareDatetime | None = None


class _Event(_View):
    """core/v1 Event and events.k8s.io/v1 Event: the same facts under two sets of names."""

    type: str | None = None
    reason: str | None = None
    message: str | None = None
    note: str | None = None
    involvedObject: _Ref | None = None
    regarding: _Ref | None = None
    count: int | None = None
    deprecatedCount: int | None = None
    firstTimestamp: AwareDatetime | None = None
    deprecatedFirstTimestamp: AwareDatetime | None = None
    lastTimestamp: AwareDatetime | None = None
    deprecatedLastTimestamp: AwareDatetime | None = None
    eventTime: AwareDatetime | None = None
    series: _Series | None = None


def _view(model: type[_View], data: object) -> Any:
    try:
        return model.model_validate(data or {})
    except ValidationError:
        return model.model_validate({})  # a field of a shape we do not know: read as absent, never fatal


# ---------------------------------------------------------------- the cluster as read


class Cluster:
    """The objects of one read, indexed, with every pod, ReplicaSet and event named by its service."""

    def __init__(self, objects: Iterable[KubeObject], *, service_labels: Sequence[str] = SERVICE_LABELS) -> None:
        self.service_labels = tuple(service_labels)
        self.by_kind: dict[str, list[KubeObject]] = defaultdict(list)
        for obj in objects:
            self.by_kind[obj.kind].append(obj)
        self._owners: dict[tuple[str, str, str], KubeObject] = {
            ("ReplicaSet", o.namespace, o.name): o for o in self.by_kind["ReplicaSet"]
        }
        self.pods = [self._pod(o) for o in self.by_kind["Pod"]]
        self._pod_service = {(p.namespace, p.name): p.service for p in self.pods}
        self._events: list[KubeEvent] | None = None

    def of(self, kind: str) -> list[KubeObject]:
        return self.by_kind.get(kind, [])

    def service_of(self, obj: KubeObject) -> str:
        """The service an object belongs to: its labels first, then the workload that owns it."""
        for label in self.service_labels:
            value = obj.metadata.labels.get(label)
            if value:
                return value
        owner = obj.metadata.owner_references[0] if obj.metadata.owner_references else None
        if owner is not None and owner.kind == "ReplicaSet":
            rs = self._owners.get(("ReplicaSet", obj.namespace, owner.name))
            return self.service_of(rs) if rs is not None else _HASH.sub("", owner.name)
        if owner is not None:
            return owner.name
        return obj.name

    def _pod(self, obj: KubeObject) -> PodState:
        spec: _PodSpec = _view(_PodSpec, obj.spec)
        status: _PodStatus = _view(_PodStatus, obj.status)
        limits = {c.name: c.resources.limits.get("memory") for c in spec.containers}
        containers = [_container(cs, limits.get(cs.name)) for cs in status.containerStatuses]
        if not containers:  # not started yet: the spec says what should run
            containers = [
                ContainerState(name=c.name, image=c.image, memory_limit=limits[c.name]) for c in spec.containers
            ]
        scheduled = next((c for c in status.conditions if c.type == "PodScheduled"), None)
        ready = next((c for c in status.conditions if c.type == "Ready"), None)
        version = next(
            (obj.metadata.labels[k] for k in ("version", "app.kubernetes.io/version") if k in obj.metadata.labels), None
        )
        if version is None:
            version = next((obj.metadata.labels[k] for k in _TEMPLATE_HASH if k in obj.metadata.labels), None)
        return PodState(
            name=obj.name,
            namespace=obj.namespace,
            service=self.service_of(obj),
            node=spec.nodeName,
            phase=status.phase,
            ready=ready is not None and ready.status == "True",
            restarts=sum(c.restarts for c in containers),
            created=obj.metadata.creation_timestamp,
            version=version,
            unschedulable=(scheduled.message or scheduled.reason or "unschedulable")
            if scheduled is not None and scheduled.status == "False"
            else None,
            containers=containers,
        )

    def events(self) -> list[KubeEvent]:
        """Events folded per (object, reason): counts added, first and last seen kept."""
        if self._events is None:
            self._events = self._fold_events()
        return list(self._events)

    def _fold_events(self) -> list[KubeEvent]:
        folded: dict[tuple[str, str, str], KubeEvent] = {}
        for obj in self.of("Event"):
            e: _Event = _view(_Event, obj.model_extra)
            ref = e.involvedObject or e.regarding or _Ref()
            what = f"{ref.kind or '?'}/{ref.name or '?'}"
            first = e.firstTimestamp or e.deprecatedFirstTimestamp or e.eventTime
            last = (e.series.lastObservedTime if e.series else None) or e.lastTimestamp or e.deprecatedLastTimestamp
            last = last or e.eventTime or first
            count = (e.series.count if e.series and e.series.count else None) or e.count or e.deprecatedCount or 1
            key = (ref.namespace or obj.namespace, what, e.reason or "")
            cur = folded.get(key)
            event = KubeEvent(
                type=e.type or "Normal",
                reason=e.reason or "",
                object=what,
                service=self._event_service(ref, obj.namespace),
                message=(e.message or e.note or "").strip()[:300],
                count=count,
                first_seen=first,
                last_seen=last,
            )
            if cur is not None:
                event = event.model_copy(
                    update={
                        "count": cur.count + count,
                        "first_seen": _earliest(cur.first_seen, first),
                        "last_seen": _latest(cur.last_seen, last),
                        "message": event.message if _later(last, cur.last_seen) else cur.message,
                    }
                )
            folded[key] = event
        return sorted(folded.values(), key=lambda e: (e.type != "Warning", -_stamp(e.last_seen), e.object))

    def _event_service(self, ref: _Ref, namespace: str) -> str | None:
        if ref.kind == "Pod" and ref.name:
            known = self._pod_service.get((ref.namespace or namespace, ref.name))
            return known or _HASH.sub("", _POD_SUFFIX.sub("", ref.name))
        if ref.kind == "ReplicaSet" and ref.name:
            rs = self._owners.get(("ReplicaSet", ref.namespace or namespace, ref.name))
            return self.service_of(rs) if rs is not None else _HASH.sub("", ref.name)
        if ref.kind in ("Deployment", "Rollout", "StatefulSet", "DaemonSet") and ref.name:
            return ref.name
        return None

    def nodes(self) -> list[NodeState]:
        out = []
        for obj in self.of("Node"):
            conditions = [_view(_Condition, c) for c in obj.status.get("conditions") or []]
            ready = next((c for c in conditions if c.type == "Ready"), None)
            problems = [c.type for c in conditions if c.type in _NODE_PROBLEMS and c.status == "True"]
            if ready is not None and ready.status != "True":
                problems.insert(0, f"NotReady ({ready.reason or ready.status})")
            out.append(
                NodeState(
                    name=obj.name,
                    ready=ready is not None and ready.status == "True",
                    problems=problems,
                    unschedulable=bool(obj.spec.get("unschedulable")),
                )
            )
        return out


def _container(cs: _ContainerStatus, memory_limit: str | None) -> ContainerState:
    state: Literal["running", "waiting", "terminated", "unknown"] = "unknown"
    reason: str | None = None
    message: str | None = None
    code: int | None = None
    if cs.state.running is not None:
        state = "running"
    elif cs.state.waiting is not None:
        state, reason, message = "waiting", cs.state.waiting.reason, cs.state.waiting.message
    elif cs.state.terminated is not None:
        t = cs.state.terminated
        state, reason, message, code = "terminated", t.reason, t.message, t.exitCode
    last = cs.lastState.terminated
    ran = last.finishedAt - last.startedAt if last and last.finishedAt and last.startedAt else None
    return ContainerState(
        name=cs.name,
        image=cs.image,
        ready=cs.ready,
        restarts=cs.restartCount,
        state=state,
        reason=reason,
        message=(message or "")[:300] or None,
        exit_code=code,
        last_reason=last.reason if last else None,
        last_exit_code=last.exitCode if last else None,
        last_finished_at=(cs.state.terminated.finishedAt if cs.state.terminated else None)
        or (last.finishedAt if last else None),
        last_ran_s=ran.total_seconds() if ran is not None else None,
        running_since=cs.state.running.startedAt if cs.state.running is not None else None,
        memory_limit=memory_limit,
    )


def _stamp(ts: datetime | None) -> float:
    return ts.timestamp() if ts is not None else 0.0


def _later(a: datetime | None, b: datetime | None) -> bool:
    return _stamp(a) >= _stamp(b)


def _earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    return min((x for x in (a, b) if x is not None), default=None)


def _latest(a: datetime | None, b: datetime | None) -> datetime | None:
    return max((x for x in (a, b) if x is not None), default=None)


# ---------------------------------------------------------------- observations


def _trouble(p: PodState) -> tuple[int, str]:
    bad = (not p.ready) + sum(c.state != "running" for c in p.containers) + (p.restarts > 0)
    return (-bad, p.name)


def workloads(pods: Sequence[PodState], *, since: datetime) -> list[WorkloadState]:
    groups: dict[str, list[PodState]] = defaultdict(list)
    for p in pods:
        groups[p.service].append(p)
    out = []
    for service, mine in sorted(groups.items()):
        ends: dict[str, int] = defaultdict(int)
        waits: dict[str, int] = defaultdict(int)
        for p in mine:
            for c in p.containers:
                if c.last_finished_at is not None and c.last_finished_at >= since:
                    ends[(c.reason if c.state == "terminated" else c.last_reason) or "unknown"] += 1
                if c.state == "waiting" and c.reason:
                    waits[c.reason] += 1
        out.append(
            WorkloadState(
                service=service,
                namespaces=sorted({p.namespace for p in mine}),
                pods=len(mine),
                ready=sum(p.ready for p in mine),
                restarts=sum(p.restarts for p in mine),
                terminations=dict(ends),
                waiting=dict(waits),
                pending=sum(p.phase == "Pending" for p in mine),
            )
        )
    return out


def pods_view(cluster: Cluster, *, service: str | None, since: datetime, read_at: datetime) -> KubernetesData:
    """A service's pods, the events about them and their owners, and the nodes they run on; with no
    service, every workload counted and the troubled pods, warnings and node problems listed."""
    pods = [p for p in cluster.pods if service is None or p.service == service]
    listed = sorted(pods, key=_trouble)
    if service is None:
        listed = [p for p in listed if _trouble(p)[0] < 0]
    events = [e for e in cluster.events() if (e.service == service if service else e.type == "Warning")]
    hosts = {p.node for p in pods if p.node}
    nodes = [n for n in cluster.nodes() if (n.name in hosts if service else n.problems or n.unschedulable)]
    return KubernetesData(
        service=service,
        read_at=read_at,
        workloads=workloads(pods, since=since),
        pods=listed[:MAX_PODS],
        events=events[:MAX_EVENTS],
        nodes=nodes,
        omitted_pods=max(len(pods) - len(listed[:MAX_PODS]), 0),
    )


def events_view(cluster: Cluster, *, service: str | None, reason: str | None, read_at: datetime) -> KubernetesData:
    events = [
        e
        for e in cluster.events()
        if (service is None or e.service == service) and (reason is None or e.reason.lower() == reason.lower())
    ]
    return KubernetesData(service=service, read_at=read_at, events=events[:MAX_EVENTS])


def nodes_view(cluster: Cluster, *, service: str | None, read_at: datetime) -> KubernetesData:
    hosts = {p.node for p in cluster.pods if p.node and (service is None or p.service == service)}
    nodes = [n for n in cluster.nodes() if service is None or n.name in hosts]
    names = {n.name for n in nodes}
    events = [e for e in cluster.events() if e.object.startswith("Node/") and e.object[5:] in names]
    return KubernetesData(service=service, read_at=read_at, nodes=nodes, events=events[:MAX_EVENTS])


# ---------------------------------------------------------------- rollout history as changes


@dataclass(frozen=True)
class _Revision:
    owner: KubeObject | None
    rs: KubeObject
    number: int
    template: dict[str, Any]


def rollout_changes(cluster: Cluster) -> list[Change]:
    """Each revision of a Deployment or Argo Rollout (its ReplicaSets) as a change: the images it
    moved between (a ``deploy``) or the pod template lines it changed (a ``config``), when its
    ReplicaSet was created, who owns it, and the pods running each version."""
    owners: dict[tuple[str, str, str], KubeObject] = {
        (o.kind, o.namespace, o.name): o for kind in ("Deployment", "Rollout") for o in cluster.of(kind)
    }
    chains: dict[tuple[str, str, str], list[_Revision]] = defaultdict(list)
    for rs in cluster.of("ReplicaSet"):
        ref = next((r for r in rs.metadata.owner_references if r.kind in ("Deployment", "Rollout")), None)
        number = next((rs.metadata.annotations[k] for k in _REVISION if k in rs.metadata.annotations), None)
        if ref is None or number is None or not number.isdigit():
            continue
        key = (ref.kind, rs.namespace, ref.name)
        template = (rs.spec.get("template") or {}).get("spec") or {}
        chains[key].append(_Revision(owners.get(key), rs, int(number), template))
    pods_of: dict[tuple[str, str], list[KubeObject]] = defaultdict(list)
    for obj in cluster.of("Pod"):
        for ref in obj.metadata.owner_references:
            if ref.kind == "ReplicaSet":
                pods_of[(obj.namespace, ref.name)].append(obj)
    out = []
    for (kind, namespace, name), revisions in chains.items():
        revisions.sort(key=lambda r: r.number)
        for before, after in itertools.pairwise(revisions):
            out.append(_change(kind, namespace, name, before, after, cluster, pods_of))
    return sorted(out, key=lambda c: (c.ts, c.id))


def _change(
    kind: str,
    namespace: str,
    name: str,
    before: _Revision,
    after: _Revision,
    cluster: Cluster,
    pods_of: dict[tuple[str, str], list[KubeObject]],
) -> Change:
    old, new = _images(before.template), _images(after.template)
    moved = {c: (old.get(c), img) for c, img in new.items() if old.get(c) != img}
    lines = [ln for ln in difflib.unified_diff(_flat(before.template), _flat(after.template), lineterm="", n=0)]
    changed = [ln for ln in lines if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    service = cluster.service_of(after.rs)
    if moved:
        summary = f"{kind} {name}: " + ", ".join(f"{c} {a or '?'} -> {b}" for c, (a, b) in moved.items())
        frm, to = _tag(next(iter(moved.values()))[0]), _tag(next(iter(moved.values()))[1])
    else:
        shown = "; ".join(f"{a[2:]} -> {b.split(': ', 1)[-1]}" for a, b in _pairs(changed)) or "pod template changed"
        summary = f"{kind} {name} pod template: {shown}"
        frm, to = f"revision {before.number}", f"revision {after.number}"
    header = f"--- {kind} {namespace}/{name} revision {before.number} (pod template)\n"
    header += f"+++ {kind} {namespace}/{name} revision {after.number}\n"
    end = _rollout_end(after, cluster) if after is not None else None
    return Change.model_validate(
        {
            "id": f"k8s-{namespace}-{name}-rev{after.number}",
            "ts": after.rs.metadata.creation_timestamp,
            "end": end,
            "service": service,
            "kind": "deploy" if moved else "config",
            "summary": summary,
            "from_version": frm,
            "to_version": to,
            "author": (after.owner.metadata.annotations.get("kubernetes.io/change-cause") if after.owner else None),
            "diff": header + "\n".join(changed) if changed else None,
            "source": "kubernetes",
            "revision": after.number,
            "pods": {
                frm or "old": sorted(p.name for p in pods_of.get((namespace, before.rs.name), [])),
                to or "new": sorted(p.name for p in pods_of.get((namespace, after.rs.name), [])),
            },
            "steps": _steps(after, pods_of.get((namespace, after.rs.name), []), end),
        }
    )


#: New pods created within this many seconds of the one before came up in one step of the rollout.
STEP_BATCH_S = 30.0


def _steps(rev: _Revision, pods: Sequence[KubeObject], end: datetime | None) -> list[dict[str, Any]]:
    """The steps of a rolling update, read from when its new pods were created: each batch of pods
    (a surge, a canary's weight raised) is a step; its weight is the share of the desired replicas the
    new version then ran. Pods created after the rollout ended (restarts, a later scale-up) are not steps."""
    start = rev.rs.metadata.creation_timestamp
    if start is None:
        return []
    # A pod stamped a few seconds before its ReplicaSet is clock rounding, not an earlier step.
    created = sorted(
        (max(p.metadata.creation_timestamp, start), p.name)
        for p in pods
        if p.metadata.creation_timestamp is not None
        and (p.metadata.creation_timestamp - start).total_seconds() >= -STEP_BATCH_S
        and (end is None or p.metadata.creation_timestamp <= end)
    )
    replicas = (rev.owner.spec.get("replicas") if rev.owner else None) or rev.rs.spec.get("replicas")
    batches: list[list[tuple[datetime, str]]] = []
    for when, name in created:
        if batches and (when - batches[-1][-1][0]).total_seconds() <= STEP_BATCH_S:
            batches[-1].append((when, name))
        else:
            batches.append([(when, name)])
    steps, running = [], 0
    for n, batch in enumerate(batches, start=1):
        running += len(batch)
        weight = min(100.0, 100.0 * running / replicas) if isinstance(replicas, int) and replicas > 0 else None
        steps.append({"ts": batch[-1][0], "index": n, "weight": weight, "pods": [name for _, name in batch]})
    return steps


def _rollout_end(rev: _Revision, cluster: Cluster) -> datetime | None:
    """When the newest revision finished rolling out (the Deployment's Progressing condition)."""
    if rev.owner is None:
        return None
    current = next((rev.owner.metadata.annotations[k] for k in _REVISION if k in rev.owner.metadata.annotations), None)
    if current != str(rev.number):
        return None
    for raw in rev.owner.status.get("conditions") or []:
        c = _view(_Condition, raw)
        if c.type == "Progressing" and c.reason == "NewReplicaSetAvailable":
            return c.lastUpdateTime or c.lastTransitionTime
    return None


def _images(template: dict[str, Any]) -> dict[str, str]:
    return {str(c.get("name")): str(c.get("image")) for c in template.get("containers") or [] if c.get("image")}


def _tag(image: str | None) -> str | None:
    if image is None:
        return None
    tail = image.rsplit("/", 1)[-1]
    return tail.split("@", 1)[0].split(":", 1)[1] if ":" in tail else tail


def _flat(value: Any, prefix: str = "") -> list[str]:
    """A pod template as sorted ``path: value`` lines; containers keyed by name, so a diff reads
    ``containers(cart).resources.limits.memory: 512Mi`` (no square brackets: reports render markup)."""
    if isinstance(value, dict):
        return [line for k in sorted(value) for line in _flat(value[k], f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v for v in value):
        return [
            line for v in value for line in _flat({k: x for k, x in v.items() if k != "name"}, f"{prefix}({v['name']})")
        ]
    if isinstance(value, list):
        return [line for i, v in enumerate(value) for line in _flat(v, f"{prefix}[{i}]")]
    return [f"{prefix}: {value}"]


def _pairs(changed: list[str]) -> list[tuple[str, str]]:
    """Removed and added lines of the same path, paired (``- a: 1`` with ``+ a: 2``)."""
    removed = {ln[1:].split(": ", 1)[0]: ln for ln in changed if ln.startswith("-")}
    out = []
    for ln in changed:
        if ln.startswith("+"):
            path = ln[1:].split(": ", 1)[0]
            old = removed.get(path)
            out.append((f"- {path}: {old.split(': ', 1)[-1]}" if old else f"- {path}: (none)", ln))
    return out


# ---------------------------------------------------------------- the rules: what counts as a sign


def _mine(data: KubernetesData, service: str) -> list[PodState]:
    return [p for p in data.pods if p.service == service]


#: A run that lasted this many seconds or less failed while starting (a dependency or sidecar not up yet).
STARTUP_FAILURE_S = 30.0


def settled(c: ContainerState, onset: datetime) -> bool:
    """Whether the container failed only while starting and has run, ready, since before onset: it
    exited within STARTUP_FAILURE_S of starting (Kubernetes starts a pod's containers in no order, and
    a service that dials a dependency or its sidecar too early exits), then came up and served through
    onset. Its restarts happened before the incident and say nothing about it."""
    return (
        c.state == "running"
        and c.ready
        and c.running_since is not None
        and c.running_since < onset
        and c.last_ran_s is not None
        and c.last_ran_s <= STARTUP_FAILURE_S
    )


def ended(
    data: KubernetesData, service: str, reasons: Sequence[str], since: datetime, *, onset: datetime | None = None
) -> list[str]:
    """Containers of the service whose run ended (now or last time) for one of ``reasons`` since then;
    with ``onset``, not those that only failed while starting and have served since before it (:func:`settled`)."""
    out = []
    for p in _mine(data, service):
        for c in p.containers:
            reason = c.reason if c.state == "terminated" else c.last_reason
            code = c.exit_code if c.state == "terminated" else c.last_exit_code
            if onset is not None and settled(c, onset):
                continue
            if reason in reasons and c.last_finished_at is not None and c.last_finished_at >= since:
                limit = f", limit {c.memory_limit}" if c.memory_limit else ""
                out.append(
                    f"{p.name}/{c.name} {reason} at {c.last_finished_at:%H:%M} (exit {code}, "
                    f"{c.restarts} restarts{limit})"
                )
    return out


def waiting(data: KubernetesData, service: str, reasons: Sequence[str]) -> list[str]:
    return [
        f"{p.name}/{c.name} waiting: {c.reason}" + (f" ({c.message[:120]})" if c.message else "")
        for p in _mine(data, service)
        for c in p.containers
        if c.state == "waiting" and c.reason in reasons
    ]


def unscheduled(data: KubernetesData, service: str) -> list[str]:
    return [f"{p.name} Pending: {p.unschedulable}" for p in _mine(data, service) if p.unschedulable]


def not_ready(data: KubernetesData, service: str) -> list[str]:
    """Pods whose containers run but are not ready: their readiness probe fails."""
    return [
        f"{p.name}/{c.name} running, not ready"
        for p in _mine(data, service)
        for c in p.containers
        if c.state == "running" and not c.ready
    ]


def events_about(
    data: KubernetesData,
    service: str,
    reasons: Sequence[str],
    since: datetime,
    pattern: re.Pattern[str] | None = None,
) -> list[KubeEvent]:
    return [
        e
        for e in data.events
        if e.service == service
        and (not reasons or e.reason in reasons)
        and (pattern is None or pattern.search(e.message))
        and (e.last_seen is None or e.last_seen >= since)
    ]


def node_problems(data: KubernetesData, service: str) -> list[str]:
    hosts = {p.node for p in _mine(data, service)}
    return [f"{n.name}: {', '.join(n.problems)}" for n in data.nodes if n.name in hosts and n.problems]


def steady(data: KubernetesData, service: str, since: datetime) -> str | None:
    """Every pod of the service ran, ready, with no container ending since then: a description of
    that, or None when it is not so (or the service has no pods here to say)."""
    pods = _mine(data, service)
    if not pods:
        return None
    for p in pods:
        if not p.ready or p.phase != "Running" or p.unschedulable:
            return None
        for c in p.containers:
            if c.state != "running" or (c.last_finished_at is not None and c.last_finished_at >= since):
                return None
    return f"all {len(pods)} pods of {service} running and ready, no container ended since {since:%H:%M}"


def since_onset(onset: datetime, minutes: float = RECENT_MIN) -> datetime:
    return onset - timedelta(minutes=minutes)
