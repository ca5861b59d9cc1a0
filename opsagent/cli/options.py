"""The options more than one command takes, declared once: same flag, same help, same default.

A flag (``--json``, ``--live/--no-live``) shows no value placeholder in ``--help``; an option that
takes a value shows what kind (``N``, ``SECONDS``, ``DIR``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from opsagent.cli.common import fail
from opsagent.loop import Budget
from opsagent.strategies import STRATEGIES

_DEFAULT = Budget()

StrategyOpt = Annotated[str, typer.Option("--strategy", "-s", metavar="NAME", help=f"one of: {', '.join(STRATEGIES)}")]
PlaybooksOpt = Annotated[
    Path | None,
    typer.Option(
        "--playbooks", metavar="DIR", help="playbook directory (default: playbooks_dir, else the shipped playbooks)"
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", metavar="", help="print JSON instead of text")]
MarkdownOpt = Annotated[
    Path | None, typer.Option("--markdown", metavar="FILE", help="also write the report as Markdown here")
]
AlertmanagerOpt = Annotated[
    str | None,
    typer.Option("--alertmanager", metavar="URL", help="Alertmanager URL (default: alertmanager.url of the config)"),
]
LessonsOpt = Annotated[
    bool,
    typer.Option(
        "--lessons/--no-lessons", metavar="", help="retrieve stored lessons (investigate: and record new ones)"
    ),
]

# ---------------------------------------------------------------- the investigation budget

KOpt = Annotated[int, typer.Option("--k", metavar="N", help="hypotheses proposed per round")]
BeamOpt = Annotated[int, typer.Option("--beam", metavar="N", help="hypotheses verified at once")]
MaxStepsOpt = Annotated[int, typer.Option("--max-steps", metavar="N", help="steps per hypothesis")]
TokenBudgetOpt = Annotated[int, typer.Option("--token-budget", metavar="N", help="tokens per investigation")]
WallOpt = Annotated[float, typer.Option("--wall-s", metavar="SECONDS", help="wall-clock cap of the investigation")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", metavar="SECONDS", help="per tool call")]

#: The budget options' defaults are the engine's (:class:`opsagent.loop.Budget`), for every command.
K, BEAM, MAX_STEPS, TOKEN_BUDGET, WALL_S, TIMEOUT_S = (
    _DEFAULT.k,
    _DEFAULT.beam,
    _DEFAULT.max_steps,
    _DEFAULT.token_budget,
    _DEFAULT.wall_s,
    _DEFAULT.timeout_s,
)


def budget(*, k: int, beam: int, max_steps: int, token_budget: int, wall_s: float, timeout_s: float) -> Budget:
    """The budget the options ask for; a count below 1 or a time that is not a positive finite
    number of seconds is bad input."""
    seconds = (wall_s, timeout_s)
    if min(k, beam, max_steps, token_budget) < 1 or not all(math.isfinite(x) and x > 0 for x in seconds):
        fail(
            "--k, --beam, --max-steps, --token-budget, --wall-s and --timeout must be positive"
            " (--wall-s and --timeout finite numbers of seconds)"
        )
    return Budget(k=k, beam=beam, max_steps=max_steps, token_budget=token_budget, wall_s=wall_s, timeout_s=timeout_s)
