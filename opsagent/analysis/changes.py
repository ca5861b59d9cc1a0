"""Changes around an incident: which changes fall in its range, how long before onset, and which
records are the steps of one rollout.

Several changes in flight at once are the normal case. A rollout is one change with a start, steps
and an end; a feed that records each step as a change of its own (a start event, then one per step
completed) is read back into that shape: records of one service moving between the same two
versions, each soon after the one before, are one rollout whose steps keep their own ids. Shared by
the replay and live change sources. No I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from opsagent import ranking
from opsagent.fixtures import Change, unix
from opsagent.models import (
    ChangeRecord,
    ChangesData,
    ChangeSuspect,
    Incident,
    Observation,
    RolloutStep,
    VersionsData,
)

#: Kinds of change that roll a new version out (and so may come in steps).
ROLLING = ("deploy", "rollout")
#: Step records of one rollout follow each other within this many minutes (when the rollout's own
#: record names no end): a release train's steps are minutes apart, two releases of one version are not.
STEP_GAP_MIN = 30.0


def changes_range(incident: Incident, before_min: float) -> tuple[float, float]:
    """From ``before_min`` minutes before onset to the end of the window, unix seconds."""
    return unix(incident.onset) - before_min * 60, unix(incident.window.end)


def change_records(
    changes: Iterable[Change], *, incident: Incident, service: str | None, before_min: float
) -> ChangesData:
    """The changes of a service (or all) from ``before_min`` minutes before onset to the window's end,
    the steps of each rollout folded into it."""
    start, end = changes_range(incident, before_min)
    chosen, notes = _unique(
        sorted(
            (c for c in changes if _in_range(c, start, end) and (service is None or c.service == service)),
            key=lambda c: (c.ts, c.id),
        )
    )
    out = [_record(group, incident) for group in rollouts(chosen)]
    out.sort(key=lambda c: (c.ts, c.id))
    return ChangesData(changes=out, notes=notes)


def _in_range(c: Change, start: float, end: float) -> bool:
    """Whether a change moved within [start, end]: it started there, a step landed there, or it was
    still rolling out (it ends after start)."""
    if unix(c.ts) > end:
        return False
    rolling = c.end is not None and unix(c.end) >= start
    return unix(c.ts) >= start or any(unix(s.ts) >= start for s in c.steps) or rolling


def _unique(changes: Sequence[Change]) -> tuple[list[Change], list[str]]:
    """The first record of each id; a second one under the same id is left out, and said so."""
    seen: dict[str, Change] = {}
    notes = []
    for c in changes:
        first = seen.get(c.id)
        if first is None:
            seen[c.id] = c
        elif first.model_dump() != c.model_dump():
            notes.append(
                f"two changes share the id {c.id!r}: kept the one of {first.ts:%Y-%m-%d %H:%M:%S} ({first.service}), "
                f"left out the one of {c.ts:%Y-%m-%d %H:%M:%S} ({c.service})"
            )
    return list(seen.values()), notes


def rollouts(changes: Sequence[Change]) -> list[list[Change]]:
    """Group records (in time order) into changes: a rolling change and the later records of the same
    service moving between the same versions before it ends (or within STEP_GAP_MIN of the record
    before, when it names no end) are one rollout; every other record is a change of its own."""
    groups: list[list[Change]] = []
    open_: dict[tuple[str, str | None, str], list[Change]] = {}
    for c in changes:
        key = (c.service, c.from_version, c.to_version or "")
        group = open_.get(key) if c.kind in ROLLING and c.to_version else None
        if group is not None and _continues(group, c):
            group.append(c)
            continue
        group = [c]
        groups.append(group)
        if c.kind in ROLLING and c.to_version:
            open_[key] = group
    return groups


def _continues(group: list[Change], c: Change) -> bool:
    first, last = group[0], group[-1]
    if first.end is not None:
        return c.ts <= first.end
    return c.ts - max([last.ts, *(s.ts for s in last.steps)]) <= timedelta(minutes=STEP_GAP_MIN)


def _record(group: list[Change], incident: Incident) -> ChangeRecord:
    first = group[0]
    steps = list(first.steps)
    pods: dict[str, list[str]] = {v: list(p) for v, p in first.pods.items()}
    for later in group[1:]:
        new_pods = later.pods.get(later.to_version or "", [])
        steps.append(RolloutStep(ts=later.ts, id=later.id, summary=later.summary, pods=new_pods))
        steps.extend(later.steps)
        for version, names in later.pods.items():
            pods[version] = sorted(set(pods.get(version, [])) | set(names))
    steps.sort(key=lambda s: s.ts)
    ends = [c.end for c in group if c.end is not None]
    end = max(ends) if ends else None
    return ChangeRecord(
        id=first.id,
        ts=first.ts,
        end=end,
        service=first.service,
        kind=first.kind,
        summary=first.summary,
        from_version=first.from_version,
        to_version=first.to_version,
        author=first.author,
        diff=next((c.diff for c in group if c.diff), None),
        url=next((c.url for c in group if c.url), None),
        minutes_before_onset=round((unix(incident.onset) - unix(first.ts)) / 60, 1),
        steps=steps,
        pods=pods,
        notes=_unknowns(first.kind, steps, end, incident),
    )


def _unknowns(kind: str, steps: list[RolloutStep], end: datetime | None, incident: Incident) -> list[str]:
    """What a rollout's record leaves unknown, in words for the report."""
    if kind != "rollout" and not steps:
        return []
    notes = []
    if end is None:
        notes.append("no end recorded: still in progress, or its end was not recorded")
    elif end > incident.window.end:
        notes.append(f"still in progress when the window ends (finished {end:%H:%M})")
    if not steps:
        notes.append("no steps recorded: its new version counts from its start")
    numbered = sorted({s.index for s in steps if s.index is not None})
    missing = sorted(set(range(1, numbered[-1] + 1)) - set(numbered)) if numbered else []
    if missing:
        notes.append(f"step(s) {', '.join(map(str, missing))} of its plan not recorded")
    return notes


def moves(change: ChangeRecord) -> list[datetime]:
    """When the change moved: its start, then each step."""
    return [change.ts, *(s.ts for s in change.steps)]


def last_move_before(change: ChangeRecord, when: datetime) -> tuple[int, datetime] | None:
    """The change's last move at or before ``when``: (0 for its start, else the step's number, its time)."""
    found = [(n, ts) for n, ts in enumerate(moves(change)) if ts <= when]
    return found[-1] if found else None


def changes_in_flight(
    observations: Iterable[Observation],
    *,
    incident: Incident,
    reachable: set[str] | None,
    anomaly: Mapping[str, float],
) -> list[ChangeSuspect]:
    """Every change the observations hold, ranked (:func:`rank_changes`) with the comparisons of
    versions the investigation made."""
    records: dict[str, tuple[str, ChangeRecord]] = {}
    versions: dict[str, tuple[str, VersionsData]] = {}
    for obs in sorted(observations, key=lambda o: o.id):
        if isinstance(obs.data, ChangesData):
            for c in obs.data.changes:
                known = records.get(c.id)
                if known is None or len(c.steps) > len(known[1].steps):
                    records[c.id] = (obs.id, c)
        elif isinstance(obs.data, VersionsData):
            versions.setdefault(obs.data.service, (obs.id, obs.data))
    return rank_changes(
        list(records.values()), incident=incident, versions=versions, reachable=reachable, anomaly=anomaly
    )


def rank_changes(
    changes: Sequence[tuple[str, ChangeRecord]],
    *,
    incident: Incident,
    versions: Mapping[str, tuple[str, VersionsData]],
    reachable: set[str] | None,
    anomaly: Mapping[str, float],
) -> list[ChangeSuspect]:
    """The changes (each with the observation it came from), most likely cause first: each scored by
    the comparison of its new version with the old (``versions``: service -> (observation id, what it
    said)), the timing of its last move before onset, whether the alerting service reaches its service
    (``reachable``; None when no call graph is known) and how anomalous its service is (``anomaly``, 0..1)."""
    out = []
    for source, c in changes:
        seen = versions.get(c.service) if c.kind in ROLLING else None
        compared = seen[1] if seen and seen[1].change_id in (None, c.id) else None
        verdict = compared.verdict if compared else "unknown"
        moved = last_move_before(c, incident.onset)
        before = None if moved is None else round((incident.onset - moved[1]).total_seconds() / 60, 1)
        on_path = reachable is None or c.service in reachable
        score = ranking.change_score(verdict, before, reachable=on_path, anomaly=anomaly.get(c.service, 0.0))
        why = [_when(c, moved, before)]
        if compared is not None and verdict != "unknown":
            why.append(f"{compared.new_version} against {compared.old_version}: {compared.reason}")
        elif c.kind in ROLLING:
            why.append(compared.reason if compared else "its versions were not compared")
        if not on_path:
            why.append(f"the alerting service does not reach {c.service} along the call graph")
        why.extend(c.notes)
        why.extend(compared.notes if compared else [])
        out.append(
            ChangeSuspect(
                id=c.id,
                ids=c.ids,
                service=c.service,
                kind=c.kind,
                from_version=c.from_version,
                to_version=c.to_version,
                started=c.ts,
                ended=c.end,
                score=round(score, 4),
                verdict=verdict,
                comparison=compared.worst() if compared else None,
                step=moved[0] if moved else None,
                step_at=moved[1] if moved else None,
                minutes_before_onset=before,
                reachable=on_path,
                why=why,
                observation_ids=[source, *([seen[0]] if compared is not None and seen else [])],
            )
        )
    return sorted(out, key=lambda c: (-c.score, c.minutes_before_onset or 0.0, c.id))


def _when(c: ChangeRecord, moved: tuple[int, datetime] | None, before: float | None) -> str:
    if moved is None or before is None:
        return f"{c.kind} started {-c.minutes_before_onset:.0f} min after onset"
    step, at = moved
    what = "started" if step == 0 else f"step {step} completed"
    return f"{c.kind} {what} at {at:%H:%M}, {before:.0f} min before onset"
