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

A command's module is imported only when that command runs (:class:`Commands`): ``opsagent --help``
imports none of them, ``opsagent replay`` neither the live adapters nor the web service. This module
must stay light: typer and nothing of the engine.

Exit codes (:class:`opsagent.cli.common.ExitCode`): 0 done with the answer asked for, 1 an internal
failure, 2 bad input, 3 ran to the end without the answer (an inconclusive investigation, sources
that need attention). User errors never show a traceback.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import Any

import typer
import typer.main

# typer vendors click (since 0.29) and its groups take and return the vendored types; the real click
# is another package, and importing it here would cost ``--help`` its start-up
from typer import _click as click
from typer.core import TyperCommand, TyperGroup

from opsagent.cli.loglevel import LogLevelOpt, log_level_ok

#: Every command, in the order ``--help`` lists it: the module that registers it and the first
#: paragraph of its help (a test checks each against the command itself).
COMMANDS: dict[str, tuple[str, str]] = {
    "investigate": (
        "investigate",
        "Investigate one incident and print the root cause, its evidence and what was ruled out.",
    ),
    "demo": (
        "investigate",
        "Replay the recorded incident opsagent ships with, offline: no server, no configuration, no lessons.",
    ),
    "replay": ("replay", "Replay recorded incidents and print a scoreboard (AC@1, AC@3, Avg@5, kind accuracy)."),
    "feedback": (
        "lessons",
        "The engineer's verdict on an investigation: it counts for the lessons it used, and a wrong"
        " conclusion with a named root cause becomes a lesson.",
    ),
    "doctor": (
        "sources",
        "Check every configured live source: reachable, version, latency, what it holds over the range an"
        " investigation reads, whether the core signals resolve, and what to fix (exit 3 when any needs attention).",
    ),
    "record": (
        "sources",
        "Investigate an alert against the live sources and write what they returned as a recorded incident"
        " (secrets redacted) that `opsagent fixtures validate` accepts.",
    ),
    "alerts": (
        "alerts",
        "List what Alertmanager is firing now; investigate one with ``opsagent investigate --alert FINGERPRINT``.",
    ),
    "prompts": ("prompts", "Show exactly what the model was told and what it answered, call by call."),
    "serve": ("serve", "Run the Alertmanager webhook service: incidents API, report pages, health and /metrics."),
    "worker": (
        "serve",
        "Run investigations only: lease jobs from the shared store (store_url: postgresql://…), run them,"
        " store their reports. Answers /healthz, /readyz and /metrics on --port, nothing else.",
    ),
    "investigations": ("investigations", "Past investigations: list, show, schema."),
    "lessons": ("lessons", "Lessons: list, show, edit, rm, export, import."),
    "fixtures": ("fixtures", "Recorded incidents: validate, schema."),
    "playbooks": ("fixtures", "Playbooks: check."),
    "mcp": (
        "mcpserve",
        "Serve investigate, get_report, list_investigations, replay, list_lessons and feedback to MCP"
        " clients (assistants, chat agents). Over http, /mcp takes the webhook's credentials"
        " (OPSAGENT_WEBHOOK_TOKEN, or basic auth), as `opsagent serve` does.",
    ),
}


def load_command(name: str) -> click.Command:
    """The click command ``name``, built by importing and registering its module alone."""
    module = importlib.import_module(f"opsagent.cli.{COMMANDS[name][0]}")
    group = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False)
    module.register(group)
    built = typer.main.get_group(group)
    return built.commands[name]


class Loaded(MutableMapping[str, click.Command]):
    """Every command's name from :data:`COMMANDS`, its click command built on first access: what
    click sees as a group's ``commands`` (its typo suggestions read the names alone)."""

    def __init__(self) -> None:
        self.built: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self.built:
            if name not in COMMANDS:
                raise KeyError(name)
            self.built[name] = load_command(name)
        return self.built[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self.built[name] = command

    def __delitem__(self, name: str) -> None:
        del self.built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*COMMANDS, *self.built]))

    def __len__(self) -> int:
        return len(dict.fromkeys([*COMMANDS, *self.built]))


class Commands(TyperGroup):
    """The top-level group: its commands are :data:`COMMANDS`, each module imported only when its
    command is asked for (run, or its own ``--help``)."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = Loaded()

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # the listing reads the table, so that ``opsagent --help`` imports no command
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [
            (name, TyperCommand(name=name, help=text).get_short_help_str(limit)) for name, (_, text) in COMMANDS.items()
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    cls=Commands,
    help="Incident root-cause analysis for on-call engineers. Read-only.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # click's own help layout: plain text that fits 80 columns, and no value placeholder on flags
    rich_markup_mode=None,
)


@app.callback()
def main(log_level: LogLevelOpt = "warning") -> None:
    log_level_ok(log_level)
    from opsagent.logconfig import configure  # structlog only once a command runs

    configure(level=log_level)
    from opsagent.tracing import configure_from_environment as configure_tracing

    configure_tracing()  # off unless OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT names a collector


__all__ = ["COMMANDS", "Commands", "app", "load_command"]
