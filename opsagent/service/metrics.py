"""The service's own Prometheus metrics, on a registry of its own (one per app, so tests and
several apps in one process do not collide)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

OUTCOMES = ("confirmed", "probable", "inconclusive", "failed")
REJECTIONS = ("unauthorized", "too_large", "media_type", "body_timeout", "disconnected", "invalid")
ACTIONS = ("opened", "updated", "resolved", "ignored")


class ServiceMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.alerts_received = Counter(
            "opsagent_alerts_received",
            "Alerts in accepted webhook notifications, by alert status",
            ["status"],
            registry=r,
        )
        self.notifications = Counter(
            "opsagent_webhook_notifications",
            "Accepted webhook notifications, by what they did (opened, updated or resolved an incident)",
            ["action"],
            registry=r,
        )
        self.rejected = Counter(
            "opsagent_webhook_rejected", "Webhook requests refused, by reason", ["reason"], registry=r
        )
        self.accept_seconds = Histogram(
            "opsagent_webhook_accept_seconds",
            "Time to validate and durably store one webhook notification",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=r,
        )
        self.investigations = Counter(
            "opsagent_investigations", "Finished investigations, by outcome", ["outcome"], registry=r
        )
        self.duration = Histogram(
            "opsagent_investigation_duration_seconds",
            "Wall time of one investigation job",
            buckets=(0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0),
            registry=r,
        )
        self.queue_depth = Gauge("opsagent_queue_depth", "Investigation jobs, by state", ["state"], registry=r)
        self.source_errors = Counter(
            "opsagent_source_errors", "Data sources an investigation could not read, by source", ["source"], registry=r
        )
        self.notify = Counter("opsagent_notify", "Posts to notification sinks, by result", ["result"], registry=r)
        for status in ("firing", "resolved"):
            self.alerts_received.labels(status=status)
        for action in ACTIONS:
            self.notifications.labels(action=action)
        for reason in REJECTIONS:
            self.rejected.labels(reason=reason)
        for outcome in OUTCOMES:
            self.investigations.labels(outcome=outcome)
        for state in ("queued", "running"):
            self.queue_depth.labels(state=state)
        for result in ("sent", "retried", "failed"):
            self.notify.labels(result=result)
