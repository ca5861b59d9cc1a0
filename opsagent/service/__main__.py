"""``python -m opsagent.service serve …``: the service without the rest of the CLI."""

from __future__ import annotations

import typer

from opsagent.cli.serve import register

cli = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False)


@cli.callback()
def main() -> None:
    """opsagent's webhook service."""


register(cli)

if __name__ == "__main__":
    cli()
