"""Turning a trigger (an Alertmanager alert) into the one fixed objective of an investigation."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from datetime import datetime, timedelta

from opsagent.models import Alert, Incident, JoinedAlert, Symptom, TimeRange

SERVICE_KEYS = ("service", "app", "application", "service_name", "job", "component", "container", "deployment")
#: Labels that name the machine an alert fired on.
NODE_KEYS = ("node", "kubernetes_node", "nodename", "host", "hostname")

_SYMPTOM_WORDS: list[tuple[Symptom, re.Pattern[str]]] = [
    (Symptom.latency, re.compile(r"latenc|slow|p9\d|duration|response.?time", re.I)),
    (Symptom.errors, re.compile(r"error|5xx|fail|exception", re.I)),
    (Symptom.availability, re.compile(r"down|unavailab|availability|unreachable|health|probe", re.I)),
    (Symptom.saturation, re.compile(r"cpu|memory|disk|saturat|queue|pool|throttl|oom", re.I)),
    (Symptom.traffic, re.compile(r"traffic|request.?rate|rps|surge|qps", re.I)),
]

DEFAULT_BEFORE = timedelta(minutes=60)
DEFAULT_AFTER = timedelta(minutes=30)
BASELINE_GAP = timedelta(minutes=5)


def alert_services(alert: Alert) -> tuple[str, ...]:
    found = [alert.labels[k] for k in SERVICE_KEYS if alert.labels.get(k)]
    return tuple(dict.fromkeys(found)) or ("unknown",)


def named_services(alert: Alert) -> tuple[str, ...]:
    """The services an alert names; none for one that names none (not the objective's ``unknown``)."""
    found = alert_services(alert)
    return () if found == ("unknown",) else found


def alert_nodes(alert: Alert) -> tuple[str, ...]:
    return tuple(dict.fromkeys(alert.labels[k] for k in NODE_KEYS if alert.labels.get(k)))


def alert_symptom(alert: Alert) -> Symptom:
    text = " ".join([alert.labels.get("alertname", ""), *alert.annotations.values()])
    for symptom, pattern in _SYMPTOM_WORDS:
        if pattern.search(text):
            return symptom
    return Symptom.unknown


def incident_id(alert: Alert) -> str:
    basis = alert.fingerprint or ",".join(f"{k}={v}" for k, v in sorted(alert.labels.items()))
    digest = hashlib.sha1(f"{basis}@{alert.starts_at.isoformat()}".encode()).hexdigest()[:10]
    return f"inc-{digest}"


def joined_alert(alert: Alert, reason: str = "") -> JoinedAlert:
    """An alert as an alert storm's objective lists it; ``reason``: why it joined."""
    return JoinedAlert(
        alertname=alert.labels.get("alertname", "alert"),
        services=named_services(alert),
        nodes=alert_nodes(alert),
        symptom=alert_symptom(alert),
        starts_at=alert.starts_at,
        fingerprint=alert.fingerprint,
        summary=alert.annotations.get("summary", ""),
        reason=reason,
    )


def open_incident(
    alert: Alert,
    *,
    onset: datetime | None = None,
    window: TimeRange | None = None,
    baseline: TimeRange | None = None,
    id: str | None = None,
    joined: Sequence[JoinedAlert] = (),
) -> Incident:
    """The immutable objective. ``onset`` defaults to the alert's start. ``joined``: the other
    alerts of an alert storm (:mod:`opsagent.correlation`); the objective then names every service
    they alert on, after the lead alert's, and lists them all."""
    start = onset or alert.starts_at
    window = window or TimeRange(start=start - DEFAULT_BEFORE, end=start + DEFAULT_AFTER)
    if baseline is None:
        end = max(start - BASELINE_GAP, window.start + timedelta(minutes=1))
        baseline = TimeRange(start=window.start, end=end)
    name = alert.labels.get("alertname", "alert")
    services = alert_services(alert)
    summary = alert.annotations.get("summary") or f"{name} on {', '.join(services)}"
    if joined:
        services = tuple(dict.fromkeys([*services, *(s for j in joined for s in j.services)]))
        summary = f"{summary} (and {len(joined)} more alert{'s' if len(joined) > 1 else ''})"
    return Incident(
        id=id or incident_id(alert),
        title=summary,
        services=services,
        symptom=alert_symptom(alert),
        onset=start,
        window=window,
        baseline=baseline,
        labels=dict(alert.labels),
        alerted_at=alert.starts_at,
        alerts=(joined_alert(alert), *joined) if joined else (),
    )
