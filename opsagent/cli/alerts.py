"""``opsagent alerts``: what Alertmanager is firing now (its v2 API, with its filters), added to the
CLI by :func:`register`; and the Alertmanager client ``investigate --alert`` / ``--from-alertmanager``
read their trigger with. A bad configuration or filter prints a clear message and exits 2."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from adapters.alertmanager.client import AlertmanagerClient, FiringAlert, started
from adapters.alertmanager.config import AlertmanagerConfig
from adapters.config import httpx_client
from opsagent.cli.common import ExitCode, fail, out, settings, wide
from opsagent.cli.options import AlertmanagerOpt, JsonOpt
from opsagent.errors import ConfigError, SourceError, UserError
from opsagent.models import Alert
from opsagent.settings import Settings
from opsagent.triggers import choose, matchers


def alertmanager(settings: Settings, url: str | None) -> AlertmanagerClient:
    """A client for the configured Alertmanager, ``url`` overriding its address (auth kept)."""
    config = settings.alertmanager
    if url:
        try:
            config = (config or AlertmanagerConfig(url=url)).model_copy(update={"url": url.rstrip("/")})
            AlertmanagerConfig.model_validate(config.model_dump())
        except ValueError as exc:
            raise ConfigError(f"--alertmanager {url}: {exc}") from exc
    if config is None:
        raise ConfigError("no Alertmanager: pass --alertmanager URL or set alertmanager.url in the config file")
    return AlertmanagerClient(httpx_client(config, os.environ), name=config.name)


async def firing(
    client: AlertmanagerClient, *, filters: list[str], silenced: bool, inhibited: bool, receiver: str | None
) -> list[FiringAlert]:
    try:
        return await client.alerts(filters=filters, silenced=silenced, inhibited=inhibited, receiver=receiver)
    finally:
        await client.aclose()


async def trigger(client: AlertmanagerClient, *, fingerprint: str | None, asked: str | None) -> Alert:
    """The alert ``--alert FINGERPRINT`` or ``--from-alertmanager MATCHERS`` names; Alertmanager
    unreachable is a user-facing error (there is nothing to investigate without the trigger)."""
    try:
        if fingerprint:
            found = await client.alert(fingerprint)
            if found is None:
                raise ConfigError(f"Alertmanager holds no alert with fingerprint {fingerprint} (see opsagent alerts)")
            return found.alert()
        wanted = matchers(asked or "")
        return choose([a.alert() for a in await client.alerts(filters=wanted)], asked=", ".join(wanted))
    except SourceError as exc:
        raise ConfigError(f"cannot read the alert from {exc.source}: {exc}") from exc
    finally:
        await client.aclose()


def alerts_table(found: list[FiringAlert], now: datetime) -> Table:
    table = Table(title=f"firing in Alertmanager ({len(found)})")
    for col in ("fingerprint", "alertname", "service", "severity", "state", "since", "summary"):
        table.add_column(col, overflow="fold")
    for a in found:
        service = next((a.labels[k] for k in ("service", "app", "job", "deployment") if a.labels.get(k)), "")
        state = (
            a.status.state
            + (" (silenced)" if a.status.silenced_by else "")
            + (" (inhibited)" if a.status.inhibited_by else "")
        )
        cells = (
            a.fingerprint,
            a.labels.get("alertname", ""),
            service,
            a.labels.get("severity", ""),
            state,
            started(a, now),
            a.annotations.get("summary", ""),
        )
        table.add_row(*(Text(c) for c in cells))
    return table


def alerts_cmd(
    filters: Annotated[
        list[str] | None,
        typer.Option(
            "--filter",
            "-f",
            metavar="MATCHER",
            help='a matcher, e.g. alertname=HighLatency or service=~"check.*" (repeat)',
        ),
    ] = None,
    silenced: Annotated[bool, typer.Option("--silenced", metavar="", help="include silenced alerts")] = False,
    inhibited: Annotated[bool, typer.Option("--inhibited", metavar="", help="include inhibited alerts")] = False,
    receiver: Annotated[
        str | None, typer.Option("--receiver", metavar="REGEX", help="only alerts routed to this receiver")
    ] = None,
    url: AlertmanagerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List what Alertmanager is firing now; investigate one with ``opsagent investigate --alert FINGERPRINT``."""
    try:
        wanted = [m for f in filters or [] for m in matchers(f)]
        client = alertmanager(settings(), url)
        found = asyncio.run(firing(client, filters=wanted, silenced=silenced, inhibited=inhibited, receiver=receiver))
    except UserError as exc:
        fail(str(exc))
    except SourceError as exc:
        fail(f"{exc.source} could not be read: {exc}", ExitCode.INCONCLUSIVE)
    if as_json:
        print(json.dumps([a.model_dump(mode="json", by_alias=True) for a in found], indent=2))
        return
    if not found:
        out.print("nothing firing" + (f" matches {', '.join(wanted)}" if wanted else ""))
        return
    wide().print(alerts_table(found, datetime.now(UTC)))


def register(app: typer.Typer) -> None:
    app.command(name="alerts")(alerts_cmd)
