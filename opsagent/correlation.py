"""Alert correlation: alerts that fire close together and are connected by the topology are one
incident (an alert storm), not one investigation each.

Two alerts are *connected* when one alerting service reaches the other along the call graph, when
both services depend on a common component, each within ``hops`` calls, or when both name the same
node (``node``, ``kubernetes_node``, ``host``… labels), unless they name different clusters or
environments (:data:`SCOPE_KEYS`): the same service in two clusters is two incidents. An alert
*joins* a storm when its start lies within ``window`` of the storm's first alert and it is
connected to one of the storm's alerts; the first storm it joins (earliest first) takes it,
otherwise it opens a storm of its own. An alert that names neither a service nor a node is
connected to nothing: it stays its own incident.

A :class:`Correlator` keeps what a long-running service needs and no more: at most ``max_storms``
storms (the least recently touched is forgotten first), at most ``max_members`` alerts and
``max_services`` services kept per storm (the rest counted), and a fingerprint index capped likewise.
So thousands of alerts a minute cost a bounded amount of memory. :func:`correlate` runs it over a
list of alerts in a stable order, for a recorded incident or one notification. The webhook service
keeps its storms in the store (:mod:`opsagent.store.storms`): each transaction seeds a correlator
with the storms the notification's alerts may belong to (:meth:`Correlator.remember`), places the
alerts, and writes back what :attr:`Correlator.changes` lists.

:func:`explain` says, per joined alert, which cause of the report accounts for it (the alerting
service is the cause, calls it, or shares its node) or that none does. Nothing here does I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from opsagent.fixtures import Edge
from opsagent.graph import callees_of, descendants
from opsagent.incident import alert_nodes, joined_alert, named_services
from opsagent.models import Alert, AlertExplained, JoinedAlert, Report

#: An alert joins a storm that began at most this long before or after it.
DEFAULT_WINDOW = timedelta(minutes=10)
#: Calls along the call graph that still connect two alerting services.
DEFAULT_HOPS = 3
#: Labels that say where an alert fired at a scope above its service: two alerts naming different
#: values of one of them (cluster a and cluster b, prod and staging) are never connected.
SCOPE_KEYS = ("cluster", "k8s_cluster", "kubernetes_cluster", "env", "environment")


def alert_scope(alert: Alert) -> dict[str, str]:
    """The scope labels an alert names (:data:`SCOPE_KEYS`)."""
    return {k: alert.labels[k] for k in SCOPE_KEYS if alert.labels.get(k)}


class CorrelationSettings(BaseModel):
    """How alerts are joined into one incident (``correlation:`` in the configuration)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        default=True,
        description="the webhook joins connected alerts of different alert groups into one incident (an alert "
        "storm is one incident; its state is in the store, shared by every web replica); false: one incident per "
        "alert group",
    )
    window_s: float = Field(
        default=DEFAULT_WINDOW.total_seconds(),
        gt=0,
        le=86_400,
        description="an alert joins a storm that began at most this long before or after it",
    )
    hops: int = Field(
        default=DEFAULT_HOPS, ge=1, le=10, description="calls along the call graph that still connect two services"
    )
    max_storms: int = Field(
        default=256,
        ge=1,
        le=100_000,
        description="storms remembered at once; the least recently touched is forgotten first",
    )
    max_members: int = Field(
        default=64, ge=1, le=10_000, description="alerts listed per storm; further ones are counted, not kept"
    )
    topology: list[Edge] = Field(
        default_factory=list,
        description="declared call edges (caller -> callee) to correlate with, beside a recorded incident's",
    )


class Topology:
    """The call graph as correlation reads it: who reaches whom within ``hops`` calls. Reach sets
    are computed on first use and kept (the graph is fixed for the topology's life)."""

    def __init__(self, edges: Iterable[Edge], *, hops: int = DEFAULT_HOPS) -> None:
        self.edges = sorted({(e.caller, e.callee) for e in edges})
        self.hops = hops
        self._below = callees_of(Edge(caller=a, callee=b) for a, b in self.edges)
        self._reach: dict[str, frozenset[str]] = {}  # only callers of the graph: as many as it has

    def reach(self, service: str) -> frozenset[str]:
        """Components ``service`` calls within ``hops`` calls (itself excluded)."""
        if service not in self._below:  # a callee only, or a name the graph has never heard of
            return frozenset()
        found = self._reach.get(service)
        if found is None:
            seen: set[str] = set()
            frontier = {service}
            for _ in range(self.hops):
                frontier = {c for n in frontier for c in self._below.get(n, ())} - seen - {service}
                if not frontier:
                    break
                seen |= frontier
            found = self._reach[service] = frozenset(seen)
        return found

    def link(self, a: str, b: str) -> str | None:
        """Why two services are connected, or None."""
        if a == b:
            return f"same service {a}"
        if b in self.reach(a):
            return f"{a} calls {b}"
        if a in self.reach(b):
            return f"{b} calls {a}"
        shared = sorted(self.reach(a) & self.reach(b))
        if shared:
            return f"{a} and {b} both depend on {shared[0]}"
        return None


@dataclass
class Storm:
    """Alerts joined into one incident. ``key``: the name its opener gave it (the webhook: the alert
    group's key, which the store deduplicates by); its first member is the alert that opened it."""

    key: str
    first: datetime
    members: list[JoinedAlert] = field(default_factory=list)
    services: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)  # each member's alert_key
    scope: dict[str, str] = field(default_factory=dict)  # the scope labels its alerts name (SCOPE_KEYS)
    firing: set[str] = field(default_factory=set)  # keys of its alerts not yet resolved (as many as members)
    count: int = 0  # every alert placed in it, kept as a member or not

    @property
    def joined(self) -> list[JoinedAlert]:
        """The alerts beside the lead."""
        return self.members[1:]


@dataclass
class Changes:
    """What placing alerts changed, for a caller that keeps storms elsewhere (the store): storms
    opened or changed (least recently touched first), storms forgotten, fingerprints indexed."""

    storms: dict[str, None] = field(default_factory=dict)  # an ordered set of keys
    forgotten: set[str] = field(default_factory=set)
    fingerprints: OrderedDict[str, tuple[str, datetime]] = field(default_factory=OrderedDict)

    def touch(self, key: str) -> None:
        self.storms.pop(key, None)
        self.storms[key] = None


@dataclass(frozen=True)
class Placement:
    storm: Storm
    opened: bool
    reason: str


class Correlator:
    """Places alerts into storms, one at a time, with bounded state."""

    def __init__(
        self,
        topology: Topology,
        *,
        window: timedelta = DEFAULT_WINDOW,
        max_storms: int = 256,
        max_members: int = 64,
        max_services: int = 64,
    ) -> None:
        self.topology = topology
        self.window = window
        self.max_storms = max_storms
        self.max_members = max_members
        self.max_services = max_services
        self._storms: OrderedDict[str, Storm] = OrderedDict()
        # fingerprint -> (storm key, the alert's start): the same fingerprint starting again much
        # later is a new firing of it, not the alert the storm holds
        self._by_fingerprint: OrderedDict[str, tuple[str, datetime]] = OrderedDict()
        self.changes = Changes()

    @classmethod
    def of(cls, settings: CorrelationSettings, topology: Topology) -> Correlator:
        """A correlator as ``settings`` say, over ``topology`` (:func:`topology_of`)."""
        return cls(
            topology,
            window=timedelta(seconds=settings.window_s),
            max_storms=settings.max_storms,
            max_members=settings.max_members,
        )

    @property
    def storms(self) -> list[Storm]:
        """The storms remembered, earliest first alert first."""
        return sorted(self._storms.values(), key=lambda s: (s.first, s.key))

    def size(self) -> tuple[int, int, int]:
        """Storms, alerts and fingerprints held: what the caps bound."""
        return len(self._storms), sum(len(s.members) for s in self._storms.values()), len(self._by_fingerprint)

    def __contains__(self, key: str) -> bool:
        return key in self._storms

    def remember(self, storm: Storm, fingerprints: Iterable[tuple[str, datetime]] = ()) -> None:
        """Hold a storm kept elsewhere, and the fingerprints of its alerts with their starts, as if
        placed here (most recently touched last); nothing is recorded in :attr:`changes`."""
        self._storms[storm.key] = storm
        for fingerprint, start in fingerprints:
            self._by_fingerprint[fingerprint] = (storm.key, start)

    def storm_of(self, alert: Alert) -> Storm | None:
        """The storm this alert was placed in, while it is remembered (by fingerprint, and a start
        within the window of the one placed)."""
        known = self._by_fingerprint.get(alert.fingerprint) if alert.fingerprint else None
        if known is None or abs(alert.starts_at - known[1]) > self.window:
            return None
        return self._storms.get(known[0])

    def place(self, alert: Alert, *, key: str) -> Placement:
        """Join ``alert`` to the first storm it is connected to, or open one keyed ``key``."""
        known = self._again(alert)
        if known is not None:
            return known
        for storm in self.storms:
            reason = self._connects(alert, storm)
            if reason is not None:
                self._add(storm, alert, reason)
                self._storms.move_to_end(storm.key)
                return Placement(storm, opened=False, reason=reason)
        return self._open(alert, key)

    def join(self, alert: Alert, *, key: str, reason: str) -> Placement:
        """Put ``alert`` in the storm keyed ``key`` whatever connects it (an alert with nothing to
        correlate by stays with its alert group's): opened when none is held, or when the one held
        began outside the window (a later firing of the group, not this storm)."""
        known = self._again(alert)
        if known is not None:
            return known
        storm = self._storms.get(key)
        if storm is None or not self.within(alert, storm):
            return self._open(alert, key)
        self._add(storm, alert, reason)
        self._storms.move_to_end(key)
        return Placement(storm, opened=False, reason=reason)

    def held(self, key: str) -> Storm | None:
        return self._storms.get(key)

    def within(self, alert: Alert, storm: Storm) -> bool:
        """Whether ``alert`` starts within the window of ``storm``'s first alert."""
        return abs(alert.starts_at - storm.first) <= self.window

    def _again(self, alert: Alert) -> Placement | None:
        known = self.storm_of(alert)
        if known is None:
            return None
        self._storms.move_to_end(known.key)
        self.changes.touch(known.key)
        if len(known.firing) < self.max_members:
            known.firing.add(alert_key(alert))
        return Placement(known, opened=False, reason="already part of it")

    def _open(self, alert: Alert, key: str) -> Placement:
        """A storm of its own for ``alert``, keyed ``key`` (replacing one held under that key)."""
        self._storms.pop(key, None)
        storm = self._storms[key] = Storm(key=key, first=alert.starts_at)
        self._add(storm, alert, "")
        while len(self._storms) > self.max_storms:
            self.forget(next(iter(self._storms)))
        return Placement(storm, opened=True, reason="")

    def settle(self, alert: Alert) -> Storm | None:
        """A resolved alert: its storm, while remembered, no longer counts it as firing."""
        storm = self.storm_of(alert)
        if storm is not None:
            storm.firing.discard(alert_key(alert))
            self.changes.touch(storm.key)
        return storm

    def forget(self, key: str) -> None:
        """Drop a storm (its incident was resolved, or it is the least recently touched)."""
        storm = self._storms.pop(key, None)
        if storm is not None:
            self.changes.storms.pop(key, None)
            self.changes.forgotten.add(key)
            for fingerprint in [f for f, (k, _) in self.changes.fingerprints.items() if k == key]:
                del self.changes.fingerprints[fingerprint]
            for member in storm.members:
                known = self._by_fingerprint.get(member.fingerprint) if member.fingerprint else None
                if member.fingerprint and known is not None and known[0] == key:
                    del self._by_fingerprint[member.fingerprint]

    def _connects(self, alert: Alert, storm: Storm) -> str | None:
        if not self.within(alert, storm):
            return None
        if any(storm.scope.get(k, v) != v for k, v in alert_scope(alert).items()):
            return None  # another cluster or environment, whatever the graph says
        for node in alert_nodes(alert):
            if node in storm.nodes:
                return f"same node {node}"
        for service in named_services(alert):
            for other in storm.services:
                reason = self.topology.link(service, other)
                if reason is not None:
                    return reason
        return None

    def _add(self, storm: Storm, alert: Alert, reason: str) -> None:
        self.changes.touch(storm.key)
        storm.count += 1
        if len(storm.members) < self.max_members:
            storm.members.append(joined_alert(alert, reason))
            storm.keys.append(alert_key(alert))
            storm.firing.add(alert_key(alert))
        for service in named_services(alert):
            if service not in storm.services and len(storm.services) < self.max_services:
                storm.services.append(service)
        for node in alert_nodes(alert):
            if node not in storm.nodes and len(storm.nodes) < self.max_services:
                storm.nodes.append(node)
        for k, v in alert_scope(alert).items():
            storm.scope.setdefault(k, v)
        if alert.fingerprint:
            cap = self.max_storms * self.max_members
            for index in (self._by_fingerprint, self.changes.fingerprints):
                index[alert.fingerprint] = (storm.key, alert.starts_at)
                index.move_to_end(alert.fingerprint)
                while len(index) > cap:
                    index.popitem(last=False)


def topology_of(settings: CorrelationSettings, edges: Iterable[Edge] = ()) -> Topology:
    """The call graph correlation reads: the declared edges of ``settings`` and ``edges``."""
    return Topology([*settings.topology, *edges], hops=settings.hops)


def alert_key(alert: Alert) -> str:
    """A stable key for an alert: its fingerprint, else its labels."""
    return alert.fingerprint or ",".join(f"{k}={v}" for k, v in sorted(alert.labels.items()))


def correlate(
    alerts: Sequence[Alert], edges: Iterable[Edge], *, window: timedelta = DEFAULT_WINDOW, hops: int = DEFAULT_HOPS
) -> list[Storm]:
    """The storms a list of alerts makes, earliest first. Alerts are placed in order of start (then
    key), so the answer does not depend on the order they are given in."""
    correlator = Correlator(Topology(edges, hops=hops), window=window, max_storms=max(1, len(alerts)))
    for alert in sorted(alerts, key=lambda a: (a.starts_at, alert_key(a))):
        correlator.place(alert, key=alert_key(alert))
    return correlator.storms


def lead_storm(
    lead: Alert,
    alerts: Sequence[Alert],
    edges: Iterable[Edge],
    *,
    window: timedelta = DEFAULT_WINDOW,
    hops: int = DEFAULT_HOPS,
) -> Storm:
    """The storm ``lead`` opens when it is placed first and ``alerts`` after it, in order of start
    (then key), as :func:`correlate` places them."""
    correlator = Correlator(Topology(edges, hops=hops), window=window, max_storms=len(alerts) + 1)
    storm = correlator.place(lead, key=alert_key(lead)).storm
    for alert in sorted(alerts, key=lambda a: (a.starts_at, alert_key(a))):
        correlator.place(alert, key=alert_key(alert))
    return storm


def storm_of(
    lead: Alert,
    alerts: Sequence[Alert],
    edges: Iterable[Edge],
    *,
    window: timedelta = DEFAULT_WINDOW,
    hops: int = DEFAULT_HOPS,
) -> list[JoinedAlert]:
    """The alerts of ``alerts`` that join the incident ``lead`` opened, the lead not among them."""
    return lead_storm(lead, alerts, edges, window=window, hops=hops).joined


# ---------------------------------------------------------------- the report's side


def explain(report: Report, graph: Iterable[Edge]) -> list[AlertExplained]:
    """Per alert of the objective (the lead first), the cause of the report that accounts for it:
    the root cause, then each other proven cause, where the alerting service is that component,
    calls it (at any depth), or shares its node; otherwise none does, and the entry says so."""
    incident = report.incident
    if not incident.alerts:
        return []
    edges = list(graph)
    causes = []
    if report.root_cause is not None:
        causes.append((report.root_cause.component, report.root_cause.kind, "the root cause"))
    causes += [(r.component, r.kind, "another proven cause") for r in report.also_proven]
    out = []
    for alert in incident.alerts:
        found = None
        for component, kind, what in causes:
            how = _accounts(component, alert, edges)
            if how is not None:
                found = AlertExplained(alert=alert, cause=f"{component}/{kind}", how=f"{what}: {how}")
                break
        if found is None:
            why = (
                "no cause was proven"
                if not causes
                else f"no proven cause is reached from {', '.join(alert.services) or 'it'}"
            )
            found = AlertExplained(alert=alert, cause=None, how=f"not explained: {why}")
        out.append(found)
    return out


def _accounts(component: str, alert: JoinedAlert, edges: list[Edge]) -> str | None:
    if component in alert.services:
        return f"{component} is the alerting service"
    if component in alert.nodes:
        return f"the alert fired on node {component}"
    for service in alert.services:
        if component in descendants(edges, (service,)):
            return f"{service} calls {component}"
    return None
