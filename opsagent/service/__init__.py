"""The Alertmanager webhook service: a durable queue of alert groups, investigated once each by
worker processes, with an incidents API, report pages and the service's own metrics.

Modules, one noun each: ``payload`` (the webhook's shape), ``auth`` (credentials), ``guard`` (what
is checked before a request is read), ``webhook`` (accepting notifications), ``incidents`` (reading
them, report pages), ``health`` (probes, /metrics), ``api`` (answer shapes, the OpenAPI document),
``running`` (the parts a process's lifespan starts), ``provider`` (what an alert's investigation
reads), ``queue`` (accepting and dispatching), ``worker`` (planning and running one job), ``charts``
and ``pages`` (HTML), ``metrics``, ``notifier`` and ``outbox`` (notifications out), ``storms``
(alert storms as one incident), ``app`` (wiring).
"""

from opsagent.service.provider import FixtureProvider, NoSources, SourceProvider

__all__ = ["FixtureProvider", "NoSources", "SourceProvider", "create_app"]


def __getattr__(name: str) -> object:
    if name == "create_app":  # FastAPI is imported only when the app is asked for
        from opsagent.service.app import create_app

        return create_app
    raise AttributeError(name)
