"""Start-up: the CPU time and peak memory of ``opsagent --help``, of the shipped demo and of replaying
one recorded incident, each beside a bare Typer app (two commands, nothing imported but typer), run
in turn in one call so that the machine's drift touches both alike.

    python benchmarks/startup_bench.py [--repeat 7]

Each run is a fresh process; CPU is its user + system time (``os.wait4``), peak its ``ru_maxrss``;
the median over ``--repeat`` runs is printed, and the ratio to the bare app's median.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent

#: The anchor: what any Typer CLI costs before it does anything.
BARE_TYPER = """
import typer
app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, pretty_exceptions_enable=False)
@app.command()
def hello(name: str = "x") -> None:
    \"\"\"Say hello.\"\"\"
@app.command()
def bye() -> None:
    \"\"\"Say bye.\"\"\"
app()
"""

OPSAGENT = "from opsagent.cli import app; app()"


def timed(argv: list[str]) -> tuple[float, float]:
    """CPU seconds (user + system) and peak RSS in MiB of one child process."""
    with tempfile.TemporaryFile() as said:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=said)
        _, status, usage = os.wait4(proc.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            said.seek(0)
            raise SystemExit(f"{' '.join(argv)} exited {code}: {said.read().decode()[-2000:]}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    incident = str(ROOT / "fixtures" / "incidents" / "order-service-threadpool-config")
    commands = {
        "bare Typer app --help": [sys.executable, "-c", BARE_TYPER, "--help"],
        "opsagent --help": [sys.executable, "-c", OPSAGENT, "--help"],
        "opsagent demo --json": [sys.executable, "-c", OPSAGENT, "demo", "--json"],
        "opsagent replay INCIDENT --json": [sys.executable, "-c", OPSAGENT, "replay", incident, "--json"],
    }
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(args.repeat):  # in turn: A B C D A B C D …
        for name, argv in commands.items():
            runs[name].append(timed(argv))
    cpu = {name: median(c for c, _ in r) for name, r in runs.items()}
    peak = {name: median(m for _, m in r) for name, r in runs.items()}
    anchor = next(iter(commands))
    print(f"median of {args.repeat} runs each, in turn; INCIDENT = {Path(incident).relative_to(ROOT)}")
    print(f"{'command':<34}{'CPU s':>8}{'x bare':>8}{'peak MiB':>10}")
    for name in commands:
        print(f"{name:<34}{cpu[name]:>8.3f}{cpu[name] / cpu[anchor]:>8.1f}{peak[name]:>10.0f}")


if __name__ == "__main__":
    main()
