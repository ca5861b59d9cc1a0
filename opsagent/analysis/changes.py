"""Changes around an incident: which changes fall in its range, and how long before onset.

Shared by the replay and live change sources. No I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable

from opsagent.fixtures import Change, unix
from opsagent.models import ChangeRecord, ChangesData, Incident


def changes_range(incident: Incident, before_min: float) -> tuple[float, float]:
    """From ``before_min`` minutes before onset to the end of the window, unix seconds."""
    return unix(incident.onset) - before_min * 60, unix(incident.window.end)


def change_records(
    changes: Iterable[Change], *, incident: Incident, service: str | None, before_min: float
) -> ChangesData:
    """The changes of a service (or all) from ``before_min`` minutes before onset to the window's end."""
    onset = unix(incident.onset)
    start, end = changes_range(incident, before_min)
    out = [
        ChangeRecord(
            id=c.id,
            ts=c.ts,
            end=c.end,
            service=c.service,
            kind=c.kind,
            summary=c.summary,
            from_version=c.from_version,
            to_version=c.to_version,
            author=c.author,
            diff=c.diff,
            url=c.url,
            minutes_before_onset=round((onset - unix(c.ts)) / 60, 1),
        )
        for c in changes
        if start <= unix(c.ts) <= end and (service is None or c.service == service)
    ]
    out.sort(key=lambda c: c.ts)
    return ChangesData(changes=out)
