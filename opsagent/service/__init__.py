"""The Alertmanager webhook service: a durable queue of alert groups, investigated once each by
worker processes, with an incidents API, report pages and the service's own metrics.

Modules, one noun each: ``payload`` (the webhook's shape), ``auth`` (credentials), ``provider``
(which sources investigate an alert), ``queue`` (accepting and dispatching), ``worker`` (running one
job), ``charts`` and ``pages`` (HTML), ``metrics``, ``notifier``, ``app`` (wiring), ``cli``.
"""

from opsagent.service.provider import FixtureProvider, NoSources, SourceProvider

__all__ = ["FixtureProvider", "NoSources", "SourceProvider", "create_app"]


def __getattr__(name: str) -> object:
    if name == "create_app":  # FastAPI is imported only when the app is asked for
        from opsagent.service.app import create_app

        return create_app
    raise AttributeError(name)
