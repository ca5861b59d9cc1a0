"""The ``opsagent`` command line (typer + rich): one module per command group, sharing the consoles,
exit codes and errors of :mod:`opsagent.cli.common` and the options of :mod:`opsagent.cli.options`.

    investigate, demo        opsagent.cli.investigate
    investigations …         opsagent.cli.investigations (list, show, schema)
    replay                   opsagent.cli.replay
    lessons …, feedback      opsagent.cli.lessons
    fixtures …, playbooks …  opsagent.cli.fixtures
    doctor, record           opsagent.cli.sources
    alerts                   opsagent.cli.alerts
    prompts                  opsagent.cli.prompts
    serve, worker            opsagent.cli.serve
    mcp                      opsagent.cli.mcpserve

Exit codes (:class:`opsagent.cli.common.ExitCode`): 0 done with the answer asked for, 1 an internal
failure, 2 bad input, 3 ran to the end without the answer (an inconclusive investigation, sources
that need attention). User errors never show a traceback.
"""

from __future__ import annotations

import typer

from opsagent.cli import (
    alerts,
    fixtures,
    investigate,
    investigations,
    lessons,
    mcpserve,
    prompts,
    replay,
    serve,
    sources,
)
from opsagent.cli.options import LogLevelOpt, log_level_ok
from opsagent.logconfig import configure
from opsagent.tracing import configure_from_environment as configure_tracing

app = typer.Typer(
    help="Incident root-cause analysis for on-call engineers. Read-only.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # click's own help layout: plain text that fits 80 columns, and no value placeholder on flags
    rich_markup_mode=None,
)


@app.callback()
def main(log_level: LogLevelOpt = "warning") -> None:
    log_level_ok(log_level)
    configure(level=log_level)
    configure_tracing()  # off unless OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT names a collector


for group in (investigate, investigations, replay, lessons, fixtures, sources, alerts, prompts, serve, mcpserve):
    group.register(app)

__all__ = ["app"]
