"""``opsagent mcp``: opsagent's tools over the Model Context Protocol (:mod:`opsagent.mcpserver`),
on stdio for an assistant that starts it, or on streamable HTTP behind the webhook's credentials."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Literal

import typer

from opsagent.cli.common import fail, settings
from opsagent.errors import ConfigError

MCP_PATH = "/mcp"


def mcp_cmd(
    transport: Annotated[
        str, typer.Option("--transport", metavar="NAME", help="stdio (an assistant starts it) or http")
    ] = "stdio",
    host: Annotated[str, typer.Option("--host", metavar="ADDR", help="with http: the address to listen on")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", metavar="N", min=0, max=65535, help="with http: the port")] = 8765,
    incidents: Annotated[
        Path | None,
        typer.Option(
            "--incidents", metavar="DIR", help="recorded incidents callers may investigate and replay by name"
        ),
    ] = None,
) -> None:
    """Serve investigate, get_report, list_investigations, replay, list_lessons and feedback to MCP
    clients (assistants, chat agents). Over http, /mcp takes the webhook's credentials
    (OPSAGENT_WEBHOOK_TOKEN, or basic auth), as `opsagent serve` does."""
    chosen: Literal["stdio", "http"]
    if transport == "stdio":
        chosen = "stdio"
    elif transport == "http":
        chosen = "http"
    else:
        fail(f"unknown transport {transport!r}; choose stdio or http")
    if incidents is not None and not incidents.is_dir():
        fail(f"--incidents {incidents}: not a directory")
    # the SDK, uvicorn and the service's auth are imported only by this command
    import uvicorn

    from opsagent.mcpserver import authenticated, build_server
    from opsagent.service.auth import Credentials

    config = settings()
    server = build_server(config, incidents_dir=incidents)
    if chosen == "stdio":
        asyncio.run(server.run_stdio_async())
        return
    try:
        creds = Credentials.from_settings(config)
    except ConfigError as exc:
        fail(str(exc))
    app = authenticated(
        server.streamable_http_app(streamable_http_path=MCP_PATH, host=host), creds.allows, creds.challenge
    )
    uvicorn.run(app, host=host, port=port, log_level="warning", lifespan="on")


def register(app: typer.Typer) -> None:
    app.command(name="mcp")(mcp_cmd)
