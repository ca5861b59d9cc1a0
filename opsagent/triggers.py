"""Triggers from the on-call engineer's terminal: an ad-hoc question (a service, a symptom, since
when) and a choice among what Alertmanager is firing, each turned into the :class:`Alert` an
investigation starts from. The objective is then fixed from it as from any alert
(:func:`opsagent.incident.open_incident`). Nothing here does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from opsagent.errors import AlertError, Problem
from opsagent.models import Alert, Symptom

#: The symptoms an engineer can name on the command line.
ASKABLE = (Symptom.latency, Symptom.errors, Symptom.saturation, Symptom.availability)
_DURATION = re.compile(r"^\s*(?:(\d+)d)?\s*(?:(\d+)h)?\s*(?:(\d+)m)?\s*(?:(\d+)s)?\s*$")
#: What each symptom is called in the alert, in words the symptom detector reads back.
_WORDS = {
    Symptom.latency: "latency",
    Symptom.errors: "errors",
    Symptom.saturation: "saturation",
    Symptom.availability: "availability",
}


#: The furthest back a question may reach: no telemetry store keeps more, and a window much older
#: than this would run off the calendar (``--since 99999999d``).
LOOKBACK = timedelta(days=366)


def duration(text: str) -> timedelta:
    """``30m``, ``2h``, ``1h30m``, ``90s``, ``1d``; at most :data:`LOOKBACK`."""
    found = _DURATION.match(text)
    if not found or not any(found.groups()):
        raise AlertError([Problem("--since", f"{text!r} is not a duration: write 30m, 2h, 1h30m or 90s")])
    d, h, m, s = (int(g or 0) for g in found.groups())
    if d * 86400 + h * 3600 + m * 60 + s > LOOKBACK.total_seconds():
        raise AlertError([Problem("--since", f"{text.strip()!r} is too long ago: at most {LOOKBACK.days}d")])
    value = timedelta(days=d, hours=h, minutes=m, seconds=s)
    if value <= timedelta(0):
        raise AlertError([Problem("--since", "the duration must be positive")])
    return value


def moment(text: str, *, now: datetime) -> datetime:
    """RFC 3339 (``2026-03-17T14:02:00Z``), or ``HH:MM`` today in UTC; within :data:`LOOKBACK`."""
    clock = re.fullmatch(r"(\d{1,2}):(\d{2})", text.strip())
    if clock:
        hour, minute = int(clock[1]), int(clock[2])
        if hour > 23 or minute > 59:
            raise AlertError([Problem("--at", f"{text.strip()!r} is not a time of day: write 00:00 to 23:59")])
        at = now.astimezone(UTC).replace(hour=hour, minute=minute, second=0, microsecond=0)
        return at - timedelta(days=1) if at > now else at
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise AlertError([Problem("--at", f"{text!r} is not a time: write 2026-03-17T14:02:00Z or 14:02")]) from None
    if parsed.tzinfo is None:
        raise AlertError([Problem("--at", "give the time zone (Z for UTC, or +02:00)")])
    if parsed < now - LOOKBACK:
        raise AlertError([Problem("--at", f"{text.strip()!r} is too long ago: at most {LOOKBACK.days} days")])
    return parsed


def symptom(text: str) -> Symptom:
    try:
        chosen = Symptom(text.strip().lower())
    except ValueError:
        chosen = Symptom.unknown
    if chosen not in ASKABLE:
        names = "|".join(s.value for s in ASKABLE)
        raise AlertError([Problem("--symptom", f"{text!r}: choose one of {names}")])
    return chosen


def ad_hoc_alert(
    service: str, what: Symptom, *, now: datetime, since: timedelta | None = None, at: datetime | None = None
) -> Alert:
    """The alert an engineer would have wanted: ``service`` shows ``what`` since ``since`` ago (or
    since ``at``; 15 minutes ago when neither is said). The investigation compares the half hour after
    that onset with the hour before it, like any alert's."""
    if since is not None and at is not None:
        raise AlertError([Problem("--since/--at", "give one of them, not both")])
    if not service.strip():
        raise AlertError([Problem("--service", "name the service")])
    onset = at if at is not None else now - (since if since is not None else timedelta(minutes=15))
    if onset > now + timedelta(minutes=1):
        raise AlertError([Problem("--at", f"{onset.isoformat()} is in the future")])
    word = _WORDS[what]
    return Alert.model_validate(
        {
            "labels": {"alertname": f"AdHoc{word.title()}", "service": service.strip(), "source": "opsagent-cli"},
            "annotations": {"summary": f"{service.strip()} {word} (asked from the command line)"},
            "startsAt": onset,
            "status": "firing",
        }
    )


_MATCHER = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$")


def matchers(text: str) -> list[str]:
    """Alertmanager filter matchers from what an engineer types: ``alertname=X,service=~"check.*"``
    (values may be left unquoted)."""
    out = []
    for part in (p for p in re.split(r",(?=(?:[^\"]*\"[^\"]*\")*[^\"]*$)", text) if p.strip()):
        found = _MATCHER.match(part)
        if found is None:
            raise AlertError([Problem("--from-alertmanager", f"{part.strip()!r}: write label=value, label=~regex…")])
        name, op, value = found.groups()
        if not (value.startswith('"') and value.endswith('"') and len(value) >= 2):
            value = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        out.append(f"{name}{op}{value}")
    if not out:
        raise AlertError([Problem("--from-alertmanager", "give at least one matcher, e.g. alertname=HighLatency")])
    return out


def choose(alerts: Sequence[Alert], *, asked: str) -> Alert:
    """The one alert a question names; none or several is an error that lists what there is."""
    if len(alerts) == 1:
        return alerts[0]
    if not alerts:
        raise AlertError([Problem("alertmanager", f"nothing firing matches {asked}")])
    listed = [
        Problem(
            "alertmanager",
            f"{a.fingerprint}  {a.labels.get('alertname', '?')}  "
            + " ".join(f"{k}={v}" for k, v in sorted(a.labels.items()) if k != "alertname"),
        )
        for a in alerts[:20]
    ]
    head = Problem("alertmanager", f"{len(alerts)} alerts match {asked}; pick one with --alert FINGERPRINT:")
    raise AlertError([head, *listed])
