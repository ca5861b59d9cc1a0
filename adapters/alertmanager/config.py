"""The configuration of the Alertmanager read for what is firing.

Models only: no client is imported here, so loading settings stays cheap; secrets come from the
environment (:mod:`adapters.baseconfig`)."""

from __future__ import annotations

from adapters.baseconfig import HttpSourceConfig, Kind


class AlertmanagerConfig(HttpSourceConfig):
    """The Alertmanager ``opsagent alerts`` and ``investigate --alert`` read what is firing from (its v2
    API). Not a telemetry source: a source of triggers. Token or password: ``OPSAGENT_ALERTMANAGER_MAIN_*``."""

    kind: Kind = "alertmanager"
    name: str = "main"
