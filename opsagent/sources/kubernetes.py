"""The Kubernetes source over any reader of objects: a live cluster (:mod:`adapters.kubernetes.reader`)
or a recorded incident's ``kubernetes.jsonl``; and rollout history as a changes reader over the same read.

One read of the cluster serves an investigation (its objects are a snapshot of now; reading them
again per question would let answers disagree); what is computed from it is :mod:`opsagent.kubestate`'s.
This module imports no client, so replaying a recording never loads one.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

import structlog

from opsagent.analysis.kube import (
    analyze,
    exhausted_backends,
    explain_exits,
    read_only_stores,
    unanswered_dependencies,
    unreachable_dependencies,
    unrouted_paths,
)
from opsagent.errors import AnswerTooLarge, SourceError
from opsagent.fixtures import Change, KubeKind, KubeObject, Recording
from opsagent.kubestate import SERVICE_LABELS, Cluster, events_view, nodes_view, pods_view, rollout_changes, since_onset
from opsagent.models import Incident, KubeFinding, KubernetesData, TimeRange
from opsagent.sources.queries import LogQuery
from opsagent.sources.readers import KubernetesReader, LogsReader

log = structlog.get_logger("opsagent.adapters")

#: The kinds read for one investigation; pods are required, the rest make it better.
READ: tuple[KubeKind, ...] = (
    "Pod",
    "Event",
    "Node",
    "ReplicaSet",
    "Deployment",
    "StatefulSet",
    "Rollout",
    "Service",
    "Endpoints",
)
#: How many of a crash-looping container's last lines are read to say why it exits, and how far back
#: a live logs source is asked for them.
LAST_LINES = 200
LAST_WORDS_LOOKBACK = timedelta(minutes=30)

#: The last lines the named containers of a service's pods wrote up to a time (oldest first): what a
#: crash-looping container said before it exited (from a logs source, or a recording's logs).
LastWords = Callable[[str, frozenset[str], datetime], Awaitable[list[str]]]


class RecordedObjects:
    """A recorded incident's Kubernetes objects, served as a reader serves a cluster's."""

    name = "kubernetes:replay"

    def __init__(self, objects: Sequence[KubeObject]) -> None:
        self._objects = list(objects)

    async def objects(self, *, kind: KubeKind) -> list[KubeObject]:
        return [o for o in self._objects if o.kind == kind]


# ---------------------------------------------------------------- the source


def _retrieved(task: asyncio.Task[object]) -> None:
    """A shared read that failed after every caller gave up is not reported as never retrieved."""
    if not task.cancelled():
        task.exception()


class KubernetesState:
    """The Kubernetes source: one read of the cluster per investigation (its objects are a snapshot
    of now; reading them again per question would let answers disagree), computed by kubestate."""

    def __init__(
        self,
        reader: KubernetesReader,
        *,
        service_labels: Sequence[str] = SERVICE_LABELS,
        now: Callable[[], datetime] | None = None,
        last_words: LastWords | None = None,
    ) -> None:
        self.reader = reader
        self._last_words = last_words
        self.name = reader.name
        self.service_labels = tuple(service_labels)
        self._now = now or (lambda: datetime.now(UTC))
        self._read: asyncio.Task[tuple[Cluster, datetime, list[str]]] | None = None

    async def cluster(self) -> tuple[Cluster, datetime, list[str]]:
        """The cluster as read, when, and the kinds that could not be read (with why).

        The read is shared by every question of the investigation, and each caller waits for it
        under its own per-call timeout: the read is shielded, so a caller that gives up (its timeout
        cancels its wait) leaves the read running for the others, and for a later call to find done."""
        if self._read is None:
            self._read = asyncio.ensure_future(self._read_all())
            self._read.add_done_callback(_retrieved)
        return await asyncio.shield(self._read)

    async def _read_all(self) -> tuple[Cluster, datetime, list[str]]:
        at = self._now()
        answers = await asyncio.gather(*(self.reader.objects(kind=k) for k in READ), return_exceptions=True)
        objects: list[KubeObject] = []
        unread: list[str] = []
        for kind, answer in zip(READ, answers, strict=True):
            if isinstance(answer, AnswerTooLarge):  # what was read before the cap is used, and named as partial
                objects.extend(o for o in answer.partial if isinstance(o, KubeObject))
                unread.append(f"{kind}: {answer}")
                log.warning("adapter.partial", source=self.name, kind=kind, error=str(answer))
            elif isinstance(answer, BaseException):
                if kind == "Pod" or not isinstance(answer, SourceError):
                    raise answer  # without pods there is nothing to say
                unread.append(f"{kind}: {answer}")
                log.warning("adapter.partial", source=self.name, kind=kind, error=str(answer))
            else:
                objects.extend(answer)
        return Cluster(objects, service_labels=self.service_labels), at, unread

    async def pods(self, *, incident: Incident, service: str | None) -> KubernetesData:
        cluster, at, unread = await self.cluster()
        data = pods_view(cluster, service=service, since=since_onset(incident.onset), read_at=at)
        if service is None:  # the whole cluster's read: which objects are broken, and why
            since = since_onset(incident.onset)
            findings = await self._explained(cluster, analyze(cluster, since=since), since=since)
            data = data.model_copy(update={"findings": findings})
        return data.model_copy(update={"unread": unread}) if unread else data

    async def _explained(self, cluster: Cluster, findings: list[KubeFinding], *, since: datetime) -> list[KubeFinding]:
        """The findings, read with what the containers' last lines say: each crash loop with what stops
        it, a backend that refuses its crash-looping callers for having too many connections in place
        of their crash loops, the store its callers find read-only as a changed setting, the
        components their callers cannot connect to (or the callers given a wrong address) or fail to
        get anything from while their pods are ready, and the components whose every request their
        entry answers not found."""
        if self._last_words is None:
            return findings
        at = self._now()
        looping = sorted({f.component for f in findings if f.kind == "crash_loop"})
        said = await asyncio.gather(
            *(self._last_words(component, _exiting(cluster, component), at) for component in looping)
        )
        last_words = dict(zip(looping, said, strict=True))
        findings = explain_exits(findings, last_words)
        callers = sorted({p.service for p in cluster.pods if p.ready})
        heard = dict(
            zip(callers, await asyncio.gather(*(self._last_words(c, frozenset(), at) for c in callers)), strict=True)
        )
        findings = exhausted_backends(cluster, findings, {**heard, **last_words})
        findings = read_only_stores(cluster, findings, heard, since=since)
        findings = [*findings, *unreachable_dependencies(cluster, findings, heard, since=since)]
        findings = [*findings, *unanswered_dependencies(cluster, findings, heard, since=since)]
        return [*findings, *unrouted_paths(cluster, findings, heard)]

    async def events(self, *, incident: Incident, service: str | None, reason: str | None) -> KubernetesData:
        cluster, at, unread = await self.cluster()
        data = events_view(cluster, service=service, reason=reason, read_at=at)
        return data.model_copy(update={"unread": unread}) if unread else data

    async def nodes(self, *, incident: Incident, service: str | None) -> KubernetesData:
        cluster, at, unread = await self.cluster()
        data = nodes_view(cluster, service=service, read_at=at)
        return data.model_copy(update={"unread": unread}) if unread else data


def _exiting(cluster: Cluster, component: str) -> frozenset[str]:
    """The containers of the component's pods that restarted or are not running: the ones whose last
    lines say why they exit (a sidecar that runs on is not asked)."""
    return frozenset(
        c.name
        for p in cluster.pods
        if p.service == component
        for c in p.containers
        if c.restarts or c.state != "running"
    )


def replay_kubernetes(recording: Recording) -> tuple[KubernetesState | None, Recording]:
    """A recorded incident's Kubernetes source (read as of the end of its window), and the recording
    with the rollout history of its objects among its changes (a change recorded both ways once)."""
    if "kubernetes" not in recording.present:
        return None, recording
    state = KubernetesState(
        RecordedObjects(recording.kubernetes),
        now=lambda: recording.window.end,
        last_words=recorded_last_words(recording),
    )
    known = {c.id for c in recording.changes}
    rollouts = [c for c in rollout_changes(Cluster(recording.kubernetes)) if c.id not in known]
    return state, recording.model_copy(update={"changes": [*recording.changes, *rollouts]})


def recorded_last_words(recording: Recording) -> LastWords:
    """A recording's logs as the last lines each service's containers wrote: the logs were captured with
    the objects, so all of them (a crashed container's lines may be stamped when they were collected,
    past the window). A line that names its container is kept only for the containers asked about:
    a sidecar's complaints are not the application's last words."""
    by_service: dict[str, list[tuple[datetime, str, str | None]]] = defaultdict(list)
    for r in recording.logs:
        container = (r.model_extra or {}).get("container")
        by_service[r.service].append((r.ts, r.message, container if isinstance(container, str) else None))
    for lines in by_service.values():
        lines.sort(key=lambda line: line[0])

    async def last_words(service: str, containers: frozenset[str], until: datetime) -> list[str]:
        return _kept(by_service.get(service, []), containers)

    return last_words


def live_last_words(reader: LogsReader) -> LastWords:
    """A live logs source's lines of a service from LAST_WORDS_LOOKBACK before the read until it, as
    a crash-looping container's last words (the cluster is not asked: its log subresource stays
    outside the read-only guard). A logs source that fails leaves the crash loop unexplained, never
    the cluster's read failed."""

    async def last_words(service: str, containers: frozenset[str], until: datetime) -> list[str]:
        half = LAST_WORDS_LOOKBACK / 2
        query = LogQuery(
            service=service,
            text=None,
            baseline=TimeRange(start=until - LAST_WORDS_LOOKBACK, end=until - half),
            window=TimeRange(start=until - half, end=until),
        )
        try:
            batch = await reader.records(query=query)
        except SourceError as exc:
            log.warning("adapter.partial", source=reader.name, kind="last words", error=str(exc))
            return []
        lines = []
        for r in batch.records:
            container = (r.model_extra or {}).get("container")
            lines.append((r.ts, r.message, container if isinstance(container, str) else None))
        return _kept(sorted(lines, key=lambda line: line[0]), containers)

    return last_words


def _kept(lines: Sequence[tuple[datetime, str, str | None]], containers: frozenset[str]) -> list[str]:
    """The last LAST_LINES messages, a line that names its container kept only for those asked about."""
    said = [m for _, m, c in lines if c is None or not containers or c in containers]
    return said[-LAST_LINES:]


class RolloutChanges:
    """Rollout history (Deployments' and Argo Rollouts' ReplicaSets) as a changes reader, over the
    same read of the cluster as the Kubernetes source."""

    def __init__(self, state: KubernetesState) -> None:
        self.state = state
        self.name = "changes:" + state.name.split(":", 1)[-1]

    async def changes(self, *, start: datetime, end: datetime, service: str | None) -> list[Change]:
        try:
            cluster, _, _ = await self.state.cluster()
        except SourceError as exc:
            raise type(exc)(str(exc), source=self.name, query=exc.query, status=exc.status) from exc
        return [
            c for c in rollout_changes(cluster) if start <= c.ts <= end and (service is None or c.service == service)
        ]
