"""Kubernetes object analyzers: which object is broken, and why, read from the objects themselves.

Most faults an SRE meets on Kubernetes are not slow code but an object that says it is broken: a
Deployment with fewer ready replicas than it asks for, a ReplicaSet whose pods the API refuses
(a namespace quota, a missing ServiceAccount), a Deployment scaled to zero, a pod no scheduler has
looked at, a node whose kubelet stopped reporting, a Service whose selector matches no pod. A crash
loop is named by what the container's last log lines say stops it, where they say (a name that does
not resolve, refused credentials): :func:`explain_exits`. Each analyzer is a plain function over one read
of the cluster (:class:`opsagent.kubestate.Cluster`) returning findings
(:class:`opsagent.models.KubeFinding`): the broken object, what kind of component it is (a
workload, a node, a namespace), the field or event that shows it, the fault kind it points to and
the services it takes down. The evidence is categorical (the object says so), so nothing here is a
threshold on a measurement.

Nothing here does I/O, and nothing here weighs a finding against other evidence: the findings
become ``kube:<sign>`` features (:mod:`opsagent.features`) and ranking weighs them.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from opsagent.kubestate import Cluster
from opsagent.logsummary import families_of
from opsagent.models import KubeEvent, KubeFinding, NodeState, PodState

#: The workload kinds whose desired and ready replicas are compared.
WORKLOADS = ("Deployment", "StatefulSet", "Rollout")
#: Labels that mark a node of the control plane (where the scheduler runs).
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
#: The taints a node controller puts on a node that stopped reporting.
DOWN_TAINT = re.compile(r"node\.kubernetes\.io/(unreachable|not-ready)")
#: The kubelet's Killing event for a container whose liveness or startup probe failed.
PROBE_KILL = re.compile(r"failed (liveness|startup) probe", re.I)
QUOTA = re.compile(r"exceeded quota", re.I)
#: An admission refusal of a pod that names a referenced object the API could not find.
MISSING_REFERENCE = re.compile(
    r"(serviceaccount|secret|configmap|persistentvolumeclaim)s? \"?[\w.-]+\"? not found", re.I
)
#: Waiting reasons that say what a container's spec references is missing or wrong.
CONFIG_WAITING = ("CreateContainerConfigError",)
#: Pod causes whose field names the fault itself (a reference the kubelet cannot resolve, an image it
#: cannot pull): direct, where a crash loop, an OOM kill or an unready pod is what other faults give too.
DIRECT_POD_CAUSES = ("missing_reference", "image_pull")
#: A pod's own state, in the order a workload's cause is read from it, with the kind each points to.
POD_CAUSES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("missing_reference", "config_change", CONFIG_WAITING),
    ("image_pull", "image_pull_failure", ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")),
    ("oom_killed", "oom_kill", ("OOMKilled",)),
    ("crash_loop", "crash_loop", ("CrashLoopBackOff", "RunContainerError", "CreateContainerError", "StartError")),
)

#: What a crash-looping container's last lines say stops it, most specific first, with the kind that
#: names the fault: a host name it cannot resolve, credentials its backend refuses, or an address its
#: configuration gives that refuses the connection (a setting is wrong, not the code). A container
#: whose last lines name none of these keeps ``crash_loop``. Keyword families: :mod:`opsagent.logsummary`.
EXIT_CAUSES: tuple[tuple[str, str], ...] = (
    ("dns", "dns_failure"),
    ("auth", "config_change"),
    ("refused", "config_change"),
)

#: A line that says a connection to an address could not be made (the address is on the same line).
CONNECT_FAILED = re.compile(
    r"unable ?to ?connect|(?:failed|could not|couldn't|can ?not|cannot) (?:to )?connect|connection refused"
    r"|ECONNREFUSED|connect(?:ion)? timed? ?out|no route to host",
    re.I,
)
#: ``host:port`` in a line: the host's first label (``cart`` of ``cart.shop.svc.cluster.local:6379``) and the
#: port. A scheme (``http://``) or a path before it is allowed; an IP address is not a host (a ClusterIP
#: is not in the read, so it names no component).
ADDRESS = re.compile(r"(?<![\w.-])([a-z][a-z0-9-]*)(?:\.[a-z0-9-]+)*:(\d{2,5})\b", re.I)
#: ``ip:port`` in a line (``ipv4:10.0.3.7:3551``, ``dial tcp 10.0.3.7:3551``): a ClusterIP or pod IP, which
#: names no component, but its port may be one no component serves.
IP_ADDRESS = re.compile(r"(?<![\w.:])(?:ipv4:)?((?:\d{1,3}\.){3}\d{1,3}):(\d{2,5})\b")
#: Lines of a caller that fail to reach one address before it counts: a restart's blip is one or two.
MIN_FAILED_CONNECTS = 5

Analyzer = Callable[[Cluster, datetime], list[KubeFinding]]


def _replicas(obj: Any) -> tuple[int | None, int]:
    desired = obj.spec.get("replicas")
    ready = obj.status.get("readyReplicas") or 0
    return (desired if isinstance(desired, int) else None), (ready if isinstance(ready, int) else 0)


def _ref(kind: str, namespace: str, name: str) -> str:
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


def _events(cluster: Cluster, service: str, reason: str, since: datetime) -> list[KubeEvent]:
    return [
        e
        for e in cluster.events()
        if e.service == service and e.reason == reason and (e.last_seen is None or e.last_seen >= since)
    ]


def _pod_cause(
    pods: Sequence[PodState], kills: Sequence[KubeEvent], ooms: Sequence[KubeEvent] = ()
) -> tuple[str, str, str, str] | None:
    """What the workload's pods say stops them: (sign, kind, why, field). Containers the kubelet
    killed because a probe failed restart like a crash loop, but the probe is what broke; and a
    container whose init the runtime OOM-killed (a ``Failed`` or ``FailedCreatePodSandBox`` event)
    is an OOM kill, whether it loops or waits in ContainerCreating."""
    if kills:
        return "probe_kills", "probe_failure", f"{kills[0].object}: {kills[0].message[:160]}", "events[Killing].message"
    if ooms:
        return (
            "oom_killed",
            "oom_kill",
            f"{ooms[0].object}: {ooms[0].message[:200]}",
            f"events[{ooms[0].reason}].message",
        )
    for sign, kind, reasons in POD_CAUSES:
        for p in pods:
            for c in p.containers:
                current = c.reason if c.state in ("waiting", "terminated") else None
                if current in reasons or (sign == "oom_killed" and c.last_reason in reasons):
                    why = f"{p.name}/{c.name} {current or c.last_reason}" + (
                        f": {c.message[:160]}" if c.message else ""
                    )
                    return sign, kind, why, "status.containerStatuses[].state"
    for p in pods:  # running again after exiting on its own: a crash loop between its back-offs
        for c in p.containers:
            if c.restarts and c.last_reason in ("Error", "StartError", "ContainerCannotRun"):
                why = f"{p.name}/{c.name} restarted {c.restarts} times, last exit {c.last_reason} ({c.last_exit_code})"
                return "crash_loop", "crash_loop", why, "status.containerStatuses[].lastState.terminated"
    pending = [p for p in pods if p.unschedulable]
    if pending:
        return (
            "unschedulable",
            "scheduling_failure",
            f"{pending[0].name} Pending: {pending[0].unschedulable}",
            ("status.conditions[PodScheduled]"),
        )
    unready = [p for p in pods if p.phase == "Running" and not p.ready]
    if unready:
        return "not_ready", "probe_failure", f"{unready[0].name} running but not ready", "status.conditions[Ready]"
    return None


def unavailable_workloads(cluster: Cluster, since: datetime) -> list[KubeFinding]:
    """Workloads with fewer ready replicas than they ask for, each with the cause their pods and
    ReplicaSets give: a namespace quota or a missing referenced object refusing the pods (the API's
    FailedCreate), a pod no scheduler has placed, or the pods' own state."""
    down = {n.name for n in cluster.nodes() if _not_ready(n)}
    out = []
    for kind in WORKLOADS:
        for obj in cluster.of(kind):
            desired, ready = _replicas(obj)
            if desired is None or desired == 0 or ready >= desired:
                continue
            service = cluster.service_of(obj)
            pods = [p for p in cluster.pods if p.service == service and p.namespace == obj.namespace]
            unready = [p for p in pods if not p.ready]
            if unready and all(p.node in down for p in unready):
                continue  # its pods sit on a node that is down: the node is the broken object
            if down and any(DOWN_TAINT.search(e.message) for e in _events(cluster, service, "FailedScheduling", since)):
                continue  # the only node it may run on is down (its taint keeps the pods off): the node's doing
            ref = _ref(kind, obj.namespace, obj.name)
            shortfall = f"{ready}/{desired} replicas ready"
            lost = [service] if ready == 0 else []  # with a ready pod left it still serves, short-handed
            refused = _events(cluster, service, "FailedCreate", since)
            quota = next((e for e in refused if QUOTA.search(e.message)), None)
            if quota is not None:
                out.append(
                    KubeFinding(
                        component=obj.namespace,
                        component_type="namespace",
                        object=f"Namespace/{obj.namespace}",
                        sign="quota_exceeded",
                        kind="scheduling_failure",
                        why=f"{ref} {shortfall}: {quota.message[:200]}",
                        field="events[FailedCreate].message",
                        affects=lost,
                        at=quota.last_seen,
                        direct=True,
                    )
                )
                continue
            missing = next((e for e in refused if MISSING_REFERENCE.search(e.message)), None)
            if missing is not None and not pods:
                out.append(
                    KubeFinding(
                        component=service,
                        component_type="workload",
                        object=ref,
                        sign="pods_refused",
                        kind="config_change",
                        why=f"{ref} {shortfall}, no pod created: {missing.message[:200]}",
                        field="events[FailedCreate].message",
                        affects=lost,
                        at=missing.last_seen,
                        direct=True,
                    )
                )
                continue
            unplaced = [p for p in pods if p.phase == "Pending" and not p.node and not p.unschedulable]
            if unplaced and not _events(cluster, service, "FailedScheduling", since):
                out.extend(_scheduler_silent(cluster, lost, ref, unplaced))
                continue
            kills = [e for e in _events(cluster, service, "Killing", since) if PROBE_KILL.search(e.message)]
            ooms = [
                e
                for reason in ("Failed", "FailedCreatePodSandBox")
                for e in _events(cluster, service, reason, since)
                if "oom" in families_of(e.message)
            ]
            cause = _pod_cause(pods, kills, ooms)
            sign, fault, why, field = cause or ("unavailable", "unknown", "no pod says why", "status.readyReplicas")
            placement = [e.message for e in _events(cluster, service, "FailedScheduling", since)]
            direct = sign in DIRECT_POD_CAUSES or (sign == "unschedulable" and _placement_refused(pods, placement))
            out.append(
                KubeFinding(
                    component=service,
                    component_type="workload",
                    object=ref,
                    sign="unavailable" if sign in ("crash_loop", "oom_killed", "not_ready") else sign,
                    kind=fault,
                    why=f"{ref} {shortfall}: {why}",
                    field=field,
                    affects=lost,
                    direct=direct,
                )
            )
    return out


def _placement_refused(pods: Sequence[PodState], said: Sequence[str]) -> bool:
    """The scheduler gave its reason for leaving the pods Pending (their PodScheduled condition's message,
    or a FailedScheduling event), and the reason names no referenced object that is missing: a claim
    that was never created is a missing reference (a quota may have refused it), not a placement the
    cluster cannot make."""
    # kubestate keeps the condition's bare reason where the read holds no message: that says no why
    worded = [p.unschedulable for p in pods if p.unschedulable and p.unschedulable.lower() != "unschedulable"]
    reasons = [*said, *worded]
    return bool(reasons) and not any(MISSING_REFERENCE.search(r) for r in reasons)


def probe_killed_workloads(cluster: Cluster, since: datetime) -> list[KubeFinding]:
    """Workloads whose containers the kubelet killed since onset because a liveness or startup probe
    failed, though they have every replica ready at the read: a probe that fails on a container
    that works (a wrong port, protocol or timing) kills it over and over, and between the kills it
    looks ready. The Killing events and the restarts they caused show it. When every pod of it was
    restarted so, it served nobody at those times: its callers' errors are its doing (``affects``).
    The workloads short of ready replicas are :func:`unavailable_workloads`' finding."""
    out = []
    for kind in WORKLOADS:
        for obj in cluster.of(kind):
            desired, ready = _replicas(obj)
            if desired is None or desired == 0 or ready < desired:
                continue
            service = cluster.service_of(obj)
            kills = [e for e in _events(cluster, service, "Killing", since) if PROBE_KILL.search(e.message)]
            pods = [p for p in cluster.pods if p.service == service and p.namespace == obj.namespace]
            restarted = [p for p in pods if _restarted(p, since)]
            if not kills or not restarted:
                continue
            ref = _ref(kind, obj.namespace, obj.name)
            out.append(
                KubeFinding(
                    component=service,
                    component_type="workload",
                    object=ref,
                    sign="probe_kills",
                    kind="probe_failure",
                    why=f"{ref} {ready}/{desired} replicas ready, restarted by its probe: "
                    f"{kills[0].object}: {kills[0].message[:160]}",
                    field="events[Killing].message",
                    affects=[service] if len(restarted) == len(pods) else [],
                    at=kills[0].last_seen,
                )
            )
    return out


def _scheduler_silent(cluster: Cluster, lost: list[str], ref: str, unplaced: list[PodState]) -> list[KubeFinding]:
    """Pods Pending with no node, no scheduling condition and no FailedScheduling event: no scheduler
    has looked at them, so the control plane that runs it is what broke."""
    planes = [n.name for n in cluster.of("Node") if _control_plane(n.metadata.labels)]
    why = f"{ref}: {unplaced[0].name} Pending, never considered by a scheduler (no node, no PodScheduled condition)"
    return [
        KubeFinding(
            component=plane,
            component_type="node",
            object=f"Node/{plane}",
            sign="scheduler_silent",
            kind="scheduling_failure",
            why=why,
            field="status.conditions[PodScheduled] absent",
            affects=lost,
        )
        for plane in planes[:1]
    ]


def _control_plane(labels: dict[str, str]) -> bool:
    return any(k in labels for k in CONTROL_PLANE_LABELS) or labels.get("kubernetes.io/role") == "master"


def scaled_to_zero(cluster: Cluster, since: datetime) -> list[KubeFinding]:
    """Workloads whose desired replicas are zero: nothing serves them, and no pod complains."""
    out = []
    for kind in WORKLOADS:
        for obj in cluster.of(kind):
            desired, _ = _replicas(obj)
            if desired != 0:
                continue
            service = cluster.service_of(obj)
            scaled = [
                e for e in cluster.events() if e.reason == "ScalingReplicaSet" and e.object.endswith(f"/{obj.name}")
            ]
            when = max((e.last_seen for e in scaled if e.last_seen is not None), default=None)
            if when is not None and when < since:
                continue  # scaled down long before the incident: a parked workload, not this fault
            ref = _ref(kind, obj.namespace, obj.name)
            out.append(
                KubeFinding(
                    component=service,
                    component_type="workload",
                    object=ref,
                    sign="scaled_to_zero",
                    kind="config_change",
                    why=f"{ref} spec.replicas is 0" + (f" (scaled down at {when:%H:%M:%S})" if when else ""),
                    field="spec.replicas",
                    affects=[service],
                    at=when,
                    direct=when is not None,  # the scale-down is seen: it belongs to this incident
                )
            )
    return out


def misrouted_services(cluster: Cluster, since: datetime) -> list[KubeFinding]:
    """Services that route to nothing their pods serve: a selector that matches no pod (while no
    workload's pod template carries those labels either, so no missing pod explains it), a target port
    that no selected pod's containers declare, or a protocol they do not declare on that port. The
    pods may be healthy; the Service object is what broke, and every caller of it fails."""
    out = []
    for svc in cluster.of("Service"):
        selector = svc.spec.get("selector")
        if not isinstance(selector, dict) or not selector or svc.spec.get("type") == "ExternalName":
            continue  # no selector: its endpoints are kept by hand, or it names a host outside
        chosen = [p for p in cluster.of("Pod") if p.namespace == svc.namespace and _selects(selector, p)]
        ref = _ref("Service", svc.namespace, svc.name)
        if not chosen:
            if any(
                _selects(selector, w, template=True)
                for kind in (*WORKLOADS, "DaemonSet")
                for w in cluster.of(kind)
                if w.namespace == svc.namespace
            ):
                continue  # its workload would run matching pods: why they are missing is the workload's finding
            wanted = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
            problem = (
                "selector_matches_nothing",
                f"{ref} selects {wanted}, and no pod has those labels",
                "spec.selector",
            )
        else:
            found = _port_problem(svc.spec.get("ports") or [], chosen)
            if found is None:
                continue
            problem = (found[0], f"{ref} {found[1]}", found[2])
        sign, why, field = problem
        out.append(
            KubeFinding(
                component=svc.name,
                component_type="service",
                object=ref,
                sign=sign,
                kind="config_change",
                why=why,
                field=field,
                affects=[svc.name],
                direct=True,
            )
        )
    return out


def _selects(selector: Mapping[str, Any], obj: Any, *, template: bool = False) -> bool:
    """Whether the object's labels (a workload's pod template's, with ``template``) carry the selector's."""
    if template:
        meta = (obj.spec.get("template") or {}).get("metadata") or {}
        labels = meta.get("labels") or {}
    else:
        labels = obj.metadata.labels
    return all(labels.get(k) == v for k, v in selector.items())


def _port_problem(ports: Sequence[Any], pods: Sequence[Any]) -> tuple[str, str, str] | None:
    """(sign, why, field) for the first Service port the selected pods' containers do not serve as
    declared; None when they do, or when they declare no port at all (nothing to compare with)."""
    declared = [
        (cp.get("containerPort"), cp.get("name"), cp.get("protocol") or "TCP")
        for pod in pods
        for c in pod.spec.get("containers") or []
        for cp in c.get("ports") or []
        if isinstance(cp, dict)
    ]
    if not declared:
        return None
    for i, port in enumerate(p for p in ports if isinstance(p, dict)):
        target = port.get("targetPort", port.get("port"))
        protocol = port.get("protocol") or "TCP"
        served = [d for d in declared if target in (d[0], d[1])]
        if not served:
            listed = ", ".join(sorted({str(d[0]) for d in declared}))
            return (
                "target_port_not_exposed",
                f"targets port {target}, and its pods declare {listed}",
                f"spec.ports[{i}].targetPort",
            )
        if all(d[2] != protocol for d in served):
            return (
                "protocol_mismatch",
                f"sends {protocol} to port {target}, and its pods serve {served[0][2]} there",
                f"spec.ports[{i}].protocol",
            )
    return None


def nodes_not_ready(cluster: Cluster, since: datetime) -> list[KubeFinding]:
    """Nodes whose Ready condition is not True: their kubelet or container runtime stopped, and every
    pod on them with it."""
    out = []
    for node in cluster.nodes():
        if not _not_ready(node):
            continue
        affected = sorted({p.service for p in cluster.pods if p.node == node.name})
        out.append(
            KubeFinding(
                component=node.name,
                component_type="node",
                object=f"Node/{node.name}",
                sign="node_not_ready",
                kind="unknown",
                why=f"node {node.name}: {', '.join(node.problems) or 'NotReady'}",
                field="status.conditions[Ready]",
                affects=affected,
                direct=True,
            )
        )
    return out


def _not_ready(node: NodeState) -> bool:
    """The node's Ready condition is there and not True (with none read at all, nothing says it is down)."""
    return any(p.startswith("NotReady") for p in node.problems)


#: Every analyzer, run in order over one read of the cluster.
ANALYZERS: tuple[Analyzer, ...] = (
    unavailable_workloads,
    probe_killed_workloads,
    scaled_to_zero,
    misrouted_services,
    nodes_not_ready,
)


def analyze(cluster: Cluster, *, since: datetime) -> list[KubeFinding]:
    """Every broken object the cluster shows, one finding per object and sign."""
    seen: set[tuple[str, str]] = set()
    out = []
    for analyzer in ANALYZERS:
        for f in analyzer(cluster, since):
            if (f.object, f.sign) not in seen:
                seen.add((f.object, f.sign))
                out.append(f)
    return out


def exit_cause(lines: Sequence[str]) -> tuple[str, str, str] | None:
    """(family, kind, the line that says it) for the most specific cause a crash-looping container's
    last lines name, or None where they name none."""
    said = [(line, set(families_of(line))) for line in lines]
    for family, kind in EXIT_CAUSES:
        line = next((line for line, families in said if family in families), None)
        if line is not None:
            return family, kind, line
    return None


def explain_exits(findings: Sequence[KubeFinding], last_words: Mapping[str, Sequence[str]]) -> list[KubeFinding]:
    """Each crash-looping workload's finding, pointing to what its containers' last lines say stops
    them where they say it (``last_words``: the last lines per component): the object shows *that*
    the container exits, its log shows *why*."""
    out = []
    for f in findings:
        cause = exit_cause(last_words.get(f.component, ())) if f.kind == "crash_loop" else None
        if cause is not None:
            family, kind, line = cause
            said = " ".join(line.split())[:200]
            f = f.model_copy(
                update={
                    "sign": f"exits_on_{family}",
                    "kind": kind,
                    "why": f"{f.why}; its log says ({family}): {said}",
                    "field": f"{f.field}, container log",
                }
            )
        out.append(f)
    return out


def unreachable_dependencies(
    cluster: Cluster, findings: Sequence[KubeFinding], said: Mapping[str, Sequence[str]], *, since: datetime
) -> list[KubeFinding]:
    """Components their callers cannot connect to while every pod of theirs is Running and ready
    (``said``: the last lines per caller). The object graph then holds the cause, not the pods: a
    caller that dials a port the component's pods and Service do not serve was given a wrong
    address (the caller's configuration is what broke); a caller that dials a port they do serve
    finds no route to healthy pods (the component's Service is what broke: its selector, port or
    protocol). A component another finding already explains (not ready, on a node that is down)
    is left to that finding, and so is one whose containers restarted since ``since``: callers
    failed to reach it while it was down, and it is up again."""
    pods, serving = _serving(cluster, findings, since)
    explained = {f.component for f in findings} | {s for f in findings for s in f.affects}
    failed: dict[tuple[str, int], dict[str, list[str]]] = {}
    for caller, lines in sorted(said.items()):
        for line in lines:
            if CONNECT_FAILED.search(line) is None:
                continue
            for host, port in sorted({(h.lower(), int(p)) for h, p in ADDRESS.findall(line)}):
                if host in serving and host != caller:
                    failed.setdefault((host, port), {}).setdefault(caller, []).append(line)
    out = [] if explained else _unserved_addresses(cluster, pods, said)
    for (target, port), by_caller in sorted(failed.items()):
        served = _served_ports(cluster, target, pods[target])
        if served and port not in served:  # each caller that dials it was given a wrong address
            out.extend(
                _wrong_address(cluster, caller, target, port, served, lines)
                for caller, lines in by_caller.items()
                if len(lines) >= MIN_FAILED_CONNECTS
            )
            continue
        count = sum(len(lines) for lines in by_caller.values())
        if count < MIN_FAILED_CONNECTS:
            continue
        ref = _ref("Service", pods[target][0].namespace, target)
        last = " ".join(next(iter(by_caller.values()))[-1].split())[:200]
        out.append(
            KubeFinding(
                component=target,
                component_type="service",
                object=ref,
                sign="unreachable_while_ready",
                kind="config_change",
                why=f"{', '.join(by_caller)} cannot connect to {target}:{port} ({count} lines) while every pod "
                f"of {target} is Running and ready: {ref} does not route to them: {last}",
                field="callers' container log; status.conditions[Ready]",
                affects=[target],
            )
        )
    return out


def _serving(
    cluster: Cluster, findings: Sequence[KubeFinding], since: datetime
) -> tuple[dict[str, list[PodState]], set[str]]:
    """Each component's pods, and the components no finding explains whose every pod is Running,
    ready, not restarted since ``since`` and on a node that is up: what its callers say about it is
    the only sign left."""
    explained = {f.component for f in findings} | {s for f in findings for s in f.affects}
    down = {n.name for n in cluster.nodes() if _not_ready(n)}
    pods: dict[str, list[PodState]] = {}
    for p in cluster.pods:
        pods.setdefault(p.service, []).append(p)
    serving = {
        service
        for service, own in pods.items()
        if service not in explained
        and all(p.phase == "Running" and p.ready and p.node not in down and not _restarted(p, since) for p in own)
    }
    return pods, serving


def _unserved_addresses(
    cluster: Cluster, pods: Mapping[str, Sequence[PodState]], said: Mapping[str, Sequence[str]]
) -> list[KubeFinding]:
    """Callers that keep failing to connect to an IP address on a port that no component of the read
    serves (its Services', containers' and probes' ports): an address no Service or pod answers on,
    so the caller's own configuration gives a wrong one. The IP names no component; the port rules
    every one out. Only called where no other finding leaves a component out of service: a component
    with no pod in the read declares no port, and the IP could be its Service's. Nothing is concluded
    where the read declares no port at all."""
    every = set().union(*(_served_ports(cluster, service, own) for service, own in pods.items()))
    if not every:
        return []
    out: list[KubeFinding] = []
    for caller, lines in sorted(said.items()):
        dialled: dict[tuple[str, int], list[str]] = {}
        for line in lines:
            if CONNECT_FAILED.search(line) is None:
                continue
            for ip, port in {(ip, int(p)) for ip, p in IP_ADDRESS.findall(line)}:
                if port not in every:
                    dialled.setdefault((ip, port), []).append(line)
        out.extend(
            _wrong_address(cluster, caller, ip, port, set(), failed)
            for (ip, port), failed in sorted(dialled.items())
            if len(failed) >= MIN_FAILED_CONNECTS and caller in pods
        )
    return out


#: A caller's line that says it failed to obtain something, and what: ``failed to retrieve ads``,
#: ``could not get product recommendations``. The words after the verb name what it asked for.
FAILED_TO_GET = re.compile(
    r"\b(?:failed|unable|could ?n[o']?t|can ?not|can't) (?:to )?"
    r"(?:get|retrieve|fetch|load|obtain|list|read|query|reach|contact|call)\b([ \w-]{0,60})",
    re.I,
)
#: Where the phrase that names what was asked for ends (``user cart`` of ``user cart during checkout``).
PREPOSITION = re.compile(r"\b(?:during|for|from|in|on|at|of|with|by|to|via|while|after|before)\b")
#: The keyword family of a call that waited too long (``deadline exceeded``, ``upstream request timeout``).
SLOW = "timeout"
#: Shortest word (after a plural ``s`` is dropped) that may name a component by the start of its name.
MIN_NAMING_WORD = 2


def unanswered_dependencies(
    cluster: Cluster, findings: Sequence[KubeFinding], said: Mapping[str, Sequence[str]], *, since: datetime
) -> list[KubeFinding]:
    """Components whose callers keep saying they failed to get what the component serves (``failed
    to retrieve ads`` for ``adservice``), while every pod of it is Running, ready, not restarted since
    ``since``, and its own last lines say nothing failed: the calls do not reach it, so the route to
    its pods (its Service) is what broke, as with callers that cannot connect to it, where the caller
    writes what it missed rather than the address. A line that says the call timed out does not
    count: that call reached something slow (a network delay), not a route to nowhere. The last word
    of the phrase that starts the name of exactly one component names it (the head of ``product
    recommendations`` is the recommendations). A component another finding already explains is left
    to that finding."""
    pods, serving = _serving(cluster, findings, since)
    quiet = {service for service in serving if not any(families_of(line) for line in said.get(service, ()))}
    keys = {service: _alnum(service) for service in pods}
    out: list[KubeFinding] = []
    for caller, lines in sorted(said.items()):
        missed: dict[str, list[str]] = defaultdict(list)
        for line in lines:
            m = FAILED_TO_GET.search(line)
            if m is None or SLOW in families_of(line):
                continue  # a call that timed out reached something slow: the route is not what broke
            target = _named_by(m.group(1), keys)
            if target is not None and target != caller:
                missed[target].append(line)
        for target, failed in sorted(missed.items()):
            if target not in quiet or len(failed) < MIN_FAILED_CONNECTS:
                continue
            ref = _ref("Service", pods[target][0].namespace, target)
            out.append(
                KubeFinding(
                    component=target,
                    component_type="service",
                    object=ref,
                    sign="unanswered_while_ready",
                    kind="config_change",
                    why=f"{caller} failed to get what {target} serves ({len(failed)} lines) while every pod of "
                    f"{target} is Running and ready and logs no failure: {ref} does not route to them: "
                    f"{' '.join(failed[-1].split())[:200]}",
                    field="callers' container log; status.conditions[Ready]",
                    affects=[target],
                )
            )
    return out


def _named_by(phrase: str, keys: Mapping[str, str]) -> str | None:
    """The component the last naming word of the phrase names: the one component whose name, letters
    and digits only, starts with the word (its plural ``s`` dropped). The phrase ends at its first
    preposition."""
    head = PREPOSITION.split(phrase.lower(), maxsplit=1)[0]  # "user cart during checkout": the cart
    for word in reversed(re.findall(r"[a-z0-9]+", head)):
        stem = word[:-1] if word.endswith("s") and len(word) > MIN_NAMING_WORD else word
        if len(stem) < MIN_NAMING_WORD:
            continue
        named = [service for service, key in keys.items() if key.startswith(stem)]
        if len(named) == 1:
            return named[0]
    return None


def _restarted(pod: PodState, since: datetime) -> bool:
    """Whether a container of the pod ended and restarted since then (or at a time it does not say)."""
    return any(c.restarts and (c.last_finished_at is None or c.last_finished_at >= since) for c in pod.containers)


def _workload_ref(cluster: Cluster, service: str) -> str:
    """The workload object of a component, as a finding names it (a Deployment of its name when none is read)."""
    namespace = next((p.namespace for p in cluster.pods if p.service == service), "")
    return next(
        (
            _ref(kind, o.namespace, o.name)
            for kind in WORKLOADS
            for o in cluster.of(kind)
            if cluster.service_of(o) == service
        ),
        _ref("Deployment", namespace, service),
    )


def _wrong_address(
    cluster: Cluster, caller: str, target: str, port: int, served: set[int], lines: Sequence[str]
) -> KubeFinding:
    ref = _workload_ref(cluster, caller)
    last = " ".join(lines[-1].split())[:200]
    return KubeFinding(
        component=caller,
        component_type="workload",
        object=ref,
        sign="dials_unserved_port",
        kind="config_change",
        why=f"{caller} fails to connect to {target}:{port} ({len(lines)} lines), and "
        + (
            f"{target} serves {', '.join(str(p) for p in sorted(served))}"
            if served
            else f"no Service, container or probe of the read serves port {port}"
        )
        + f": {last}",
        field="container log; spec.containers[].ports",
        affects=[caller],
    )


def _served_ports(cluster: Cluster, service: str, pods: Sequence[PodState]) -> set[int]:
    """The ports a component serves as the objects declare them: its Service's ports and its pods'
    container ports and probe ports. Empty where none is declared (nothing to compare a dialled port with)."""
    names = {p.name for p in pods}
    served: set[object] = set()
    for svc in cluster.of("Service"):
        if svc.name == service:
            served |= {p.get("port") for p in svc.spec.get("ports") or [] if isinstance(p, dict)}
    for pod in cluster.of("Pod"):
        if pod.name not in names:
            continue
        for c in pod.spec.get("containers") or []:
            if not isinstance(c, dict):
                continue
            served |= {cp.get("containerPort") for cp in c.get("ports") or [] if isinstance(cp, dict)}
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                handler = c.get(probe)
                if not isinstance(handler, dict):
                    continue
                for action in ("tcpSocket", "grpc", "httpGet"):
                    target = handler.get(action)
                    served.add(target.get("port") if isinstance(target, dict) else None)
            served |= _described_probe_ports(c.get("probesDescribed"))
    return {p for p in served if isinstance(p, int)}


#: A probe as ``kubectl describe pod`` prints it (``tcp-socket :6379 delay=5s …``, ``grpc <pod>:9555 …``,
#: ``http-get http://:8080/healthz …``): the port it checks.
DESCRIBED_PROBE = re.compile(r"^\s*(?:tcp-socket|grpc|http-get)\s+\S*?:(\d{1,5})(?![\d])")


def _described_probe_ports(described: object) -> set[int]:
    """The ports of a container's probes where a recording holds them only as ``kubectl describe``
    prints them (``probesDescribed``: probe name to text), because it was made from that text and not
    from the API's objects. The same port the API's ``tcpSocket``/``grpc``/``httpGet`` fields give."""
    if not isinstance(described, dict):
        return set()
    matches = (DESCRIBED_PROBE.match(text) for text in described.values() if isinstance(text, str))
    return {int(m.group(1)) for m in matches if m is not None}


#: The keyword family of a backend that refuses new connections because it has as many as it allows
#: (``Too many connections``): its callers' last words and its own log both say it.
EXHAUSTION = "pool"
#: Crash-looping workloads whose last words name the exhaustion before a backend is looked for: one
#: caller's own pool running dry is that caller's fault.
MIN_EXHAUSTED_CALLERS = 2


def exhausted_backends(
    cluster: Cluster, findings: Sequence[KubeFinding], said: Mapping[str, Sequence[str]]
) -> list[KubeFinding]:
    """The findings, with the backend that refuses connections for having too many named in place of
    the crash loops it causes (``said``: the last lines per component). Several workloads exit
    because a server refused them a connection for being full, and one component whose pods are
    ready logs that very refusal itself, more than any other: that component's connection limit is
    what broke, and the crash-looping callers are under its ``affects`` (as a node that is down
    stands for the workloads on it). Where no single component logs it, the crash loops stand."""
    victims = [
        f
        for f in findings
        if f.kind == "crash_loop" and any(EXHAUSTION in families_of(line) for line in said.get(f.component, ()))
    ]
    if len({f.component for f in victims}) < MIN_EXHAUSTED_CALLERS:
        return list(findings)
    looping = {f.component for f in findings}
    ready = {p.service for p in cluster.pods if p.ready} - looping
    told = {
        c: [line for line in lines if EXHAUSTION in families_of(line)]
        for c, lines in sorted(said.items())
        if c in ready
    }
    ranked = sorted(((len(lines), c) for c, lines in told.items() if len(lines) >= MIN_FAILED_CONNECTS), reverse=True)
    if not ranked or (len(ranked) > 1 and ranked[0][0] == ranked[1][0]):
        return list(findings)
    count, backend = ranked[0]
    ref = _workload_ref(cluster, backend)
    callers = sorted({f.component for f in victims})
    said_line = " ".join(told[backend][-1].split())[:200]
    found = KubeFinding(
        component=backend,
        component_type="workload",
        object=ref,
        sign="refuses_connections",
        kind="db_pool_exhaustion",
        why=f"{len(callers)} workloads exit because a server refused them a connection for having too many "
        f"({', '.join(callers[:5])}{', …' if len(callers) > 5 else ''}), and {backend}, ready, logs that refusal "
        f"({count} of its last lines): {said_line}",
        field="container log",
        affects=callers,
    )
    return [*(f for f in findings if f not in victims), found]


#: A line of an HTTP access log (the common and combined formats nginx, Apache and Envoy write):
#: the path requested and the status answered.
ACCESS_LINE = re.compile(r'"(?:GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) (/[^\s"?]*)[^"]*" (\d{3})\b')
#: The status of a path that routes nowhere: nothing behind the route knows it.
NOT_FOUND = "404"
#: A path segment shorter than this names no component (``v1``, ``api``).
MIN_ROUTE_SEGMENT = 4


def unrouted_paths(
    cluster: Cluster, findings: Sequence[KubeFinding], said: Mapping[str, Sequence[str]]
) -> list[KubeFinding]:
    """Components whose requests their entry has answered ``404 Not Found`` since some point, every one
    of them to the last, while it went on answering its other paths (``said``: the last lines per
    component, an entry's access log among them). A path names the component it is for by convention
    (``/api/v2/basket/…`` for ``shop-basket``): where at least MIN_FAILED_CONNECTS requests
    in a row to that path, up to the last, were not found, the route in front of the component (a
    gateway's or an Ingress's) sends them somewhere that does not serve them, and the component is cut
    off for them. A component another finding already explains (not ready, scaled to zero) is left to
    that finding."""
    explained = {f.component for f in findings} | {s for f in findings for s in f.affects}
    components = sorted({p.service for p in cluster.pods})
    out: list[KubeFinding] = []
    for caller, lines in sorted(said.items()):
        answered: dict[tuple[str, str], list[tuple[int, str, str]]] = defaultdict(list)
        served: list[tuple[int, tuple[str, str] | None]] = []  # where other paths were answered 2xx or 3xx
        for i, line in enumerate(lines):
            m = ACCESS_LINE.search(line)
            if m is None:
                continue
            route = _route_of(m.group(1), components)
            if route is not None:
                answered[route].append((i, m.group(2), line))
            if m.group(2)[0] in "23":
                served.append((i, route))
        for (prefix, target), requests in sorted(answered.items()):
            run = list(itertools.takewhile(lambda r: r[1] == NOT_FOUND, reversed(requests)))
            if len(run) < MIN_FAILED_CONNECTS or target == caller or target in explained:
                continue
            since = run[-1][0]
            if not any(i >= since and route != (prefix, target) for i, route in served):
                continue  # the entry answers nothing else either: it is broken, not one route
            out.append(
                KubeFinding(
                    component=target,
                    component_type="service",
                    object=f"Route{prefix}",
                    sign="route_not_found",
                    kind="config_change",
                    why=f"{caller} answered the last {len(run)} requests to {prefix} (for {target}) "
                    f"{NOT_FOUND} Not Found while it served its other paths: the route in front of {target} "
                    f"sends them where nothing serves them: {' '.join(run[0][2].split())[:200]}",
                    field="entry's access log",
                    affects=[target],
                )
            )
    return out


def _route_of(path: str, components: Sequence[str]) -> tuple[str, str] | None:
    """(the path up to the segment that names a component, that component), where exactly one
    component's name, letters and digits only, is the segment or ends with it."""
    segments = [s for s in path.split("/") if s]
    for i, segment in enumerate(segments):
        key = _alnum(segment)
        if len(key) < MIN_ROUTE_SEGMENT:
            continue
        named = [c for c in components if _alnum(c).endswith(key)]
        if len(named) == 1:
            return "/" + "/".join(segments[: i + 1]), named[0]
    return None


def _alnum(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


#: A caller's line saying its data store refused a write because the store runs read-only (MySQL's
#: ``--read-only`` option, PostgreSQL's read-only transaction, a Redis replica's ``READONLY``): a
#: setting of the store, not a fault of the caller's code. A read-only *file system* is a disk matter.
READ_ONLY = re.compile(
    r"running with the --(?:super-)?read-only option|in a read-only transaction|READONLY You can't write"
    r"|read[- ]only (?:mode|replica)",
    re.I,
)


def read_only_stores(
    cluster: Cluster, findings: Sequence[KubeFinding], said: Mapping[str, Sequence[str]], *, since: datetime
) -> list[KubeFinding]:
    """The findings, with the store its callers find read-only named as a changed setting (``said``:
    the last lines per component). Callers' lines say a server refused their writes because it runs
    read-only, but not which server; the one component every pod of which restarted since ``since``
    and that does not say it itself is the store whose setting changed: a store is set read-only by
    a restart with the option (its probe may fail while it comes back, and then it looks ready).
    Where no such line is heard MIN_FAILED_CONNECTS times, or no single component restarted so, the
    findings stand."""
    told = {c: [line for line in lines if READ_ONLY.search(line)] for c, lines in sorted(said.items())}
    told = {c: lines for c, lines in told.items() if lines}
    if sum(len(lines) for lines in told.values()) < MIN_FAILED_CONNECTS:
        return list(findings)
    pods: dict[str, list[PodState]] = defaultdict(list)
    for p in cluster.pods:
        pods[p.service].append(p)
    restarted = sorted(c for c, own in pods.items() if c not in told and all(_restarted(p, since) for p in own))
    if len(restarted) != 1:
        return list(findings)
    (store,) = restarted
    callers = sorted(told)
    ref = _workload_ref(cluster, store)
    line = " ".join(told[callers[0]][-1].split())[:200]
    found = KubeFinding(
        component=store,
        component_type="workload",
        object=ref,
        sign="restarted_read_only",
        kind="config_change",
        why=f"every pod of {store} restarted since {since:%H:%M}, and its callers ({', '.join(callers[:5])}) "
        f"find their store read-only: {line}",
        field="status.containerStatuses[].lastState.terminated, callers' container log",
        affects=callers,
    )
    return [*(f for f in findings if f.component != store), found]
