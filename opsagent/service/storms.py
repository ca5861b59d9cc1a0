"""Alert storms at the webhook: each notification's alerts go to the incident of their storm.

The store deduplicates by key: a notification whose key has an open incident updates it. Without
correlation the key is the alert group's. With it, :func:`split` places every firing alert
with a :class:`~opsagent.correlation.Correlator` and splits the notification into one part per
storm, keyed by the storm (the group key of the notification that opened it): a later alert of a
storm joins its open incident whatever group it comes in, an unconnected alert of the same group
opens an incident of its own. A part routed to another group's incident carries no start times, so
it never reads as a new episode of that group. A resolved alert leaves its storm; the storm's
incident is resolved with the last of its alerts, and updated until then.

The correlator is seeded from the store, in the transaction that stores the parts
(:mod:`opsagent.store.storms`), so every web replica splits against the same storms. Nothing here
does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from opsagent.correlation import Correlator, Storm, alert_key
from opsagent.incident import alert_nodes, named_services
from opsagent.models import Alert
from opsagent.service.payload import WebhookAlert, WebhookPayload


@dataclass
class Part:
    """What the store receives for one storm of a notification."""

    key: str
    status: Literal["firing", "resolved"]
    alerts: list[WebhookAlert] = field(default_factory=list)
    #: routed to an incident another alert group opened: no start times (never a new episode of it)
    joined: bool = False

    def payload(self, whole: WebhookPayload) -> WebhookPayload:
        if len(self.alerts) == len(whole.alerts) and self.status == whole.status and self.key == whole.group_key:
            return whole  # the whole notification, stored as it came
        status = "firing" if any(a.status == "firing" for a in self.alerts) else "resolved"
        # what the part's alerts have in common, as Alertmanager computes it for a group
        common = {
            "common_labels": _shared([a.labels for a in self.alerts]),
            "common_annotations": _shared([a.annotations for a in self.alerts]),
        }
        return whole.model_copy(update={"alerts": list(self.alerts), "status": status, **common})


def _shared(mappings: list[dict[str, str]]) -> dict[str, str]:
    first, *rest = mappings
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in rest)}


def split(payload: WebhookPayload, correlator: Correlator | None) -> list[Part]:
    """The parts of a notification, one per storm; ``None`` correlator: one part, the alert
    group's, as without correlation."""
    if correlator is None:
        return [Part(payload.group_key, payload.status, list(payload.alerts))]
    parts: dict[str, Part] = {}
    settled: dict[str, Storm] = {}
    for alert in payload.alerts:
        if alert.status == "resolved":
            storm = correlator.settle(alert.as_alert())
            if storm is not None:
                settled[storm.key] = storm
    for alert in sorted(payload.firing, key=lambda a: a.starts_at):
        one = alert.as_alert()
        if named_services(one) or alert_nodes(one):
            placement = correlator.place(one, key=_new_key(correlator, payload, one))
        else:  # nothing to correlate it by: it stays with its alert group, as without correlation
            placement = correlator.join(one, key=payload.group_key, reason="same alert group")
        key = placement.storm.key
        parts.setdefault(key, Part(key, "firing", joined=key != payload.group_key)).alerts.append(alert)
    resolved = [a for a in payload.alerts if a.status == "resolved"]
    if parts:  # a firing notification: its resolved alerts go along with its first storm's update
        first = next(iter(parts.values()))
        first.alerts.extend(resolved)
        return list(parts.values())
    out = []
    for alert in resolved:
        storm = correlator.storm_of(alert.as_alert())
        key = storm.key if storm is not None else payload.group_key
        part = parts.get(key)
        if part is None:
            still = storm is not None and bool(storm.firing)
            # a storm with alerts still firing is updated, not resolved, by one of them ending
            part = parts[key] = Part(key, "firing" if still else "resolved", joined=key != payload.group_key)
            out.append(part)
        part.alerts.append(alert)
    for key, storm in settled.items():
        if not storm.firing:
            correlator.forget(key)
    return out


def _new_key(correlator: Correlator, payload: WebhookPayload, alert: Alert) -> str:
    """The key of a storm this alert would open: the group's, unless the group's storm is held and
    this alert falls in its window (an alert of the group unconnected to its storm, at the same
    time: a storm of its own). Outside the window it is a later firing of the group: the group's
    storm is replaced, and its incident's episodes are told apart by the store as without
    correlation."""
    held = correlator.held(payload.group_key)
    if held is not None and correlator.within(alert, held):
        return f"{payload.group_key}|{alert_key(alert)}"
    return payload.group_key
