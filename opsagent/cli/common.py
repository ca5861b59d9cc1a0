"""What every command of the CLI shares: the two consoles, the exit codes, how an error is said, the
settings and the store.

Both consoles print text, never markup or emoji codes: ``[chg-5c1e7a2]`` and ``log:new:tls`` are
data, and data is printed as it is. Styling is given as :class:`rich.text.Text` styles.

A user error (bad input, bad configuration, a store that cannot be read) is one line on stderr and
:attr:`ExitCode.BAD_INPUT`, never a traceback.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from enum import IntEnum
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from opsagent.errors import UserError
from opsagent.settings import Settings, load_settings
from opsagent.store import Store, StoreError

T = TypeVar("T")


class ExitCode(IntEnum):
    """What ``opsagent`` exits with (docs/cli.md, Exit codes)."""

    #: done, and the answer is what was asked for: a cause concluded, every source healthy, all valid
    OK = 0
    #: opsagent itself failed, or a result could not be written (the report is printed all the same)
    INTERNAL = 1
    #: bad input: an option, the configuration, an alert, a recorded incident, a playbook, the store
    BAD_INPUT = 2
    #: it ran to the end without the answer: an investigation inconclusive, sources that need attention
    INCONCLUSIVE = 3


def plain_console(*, stderr: bool = False, width: int | None = None) -> Console:
    """A console that prints what it is given: no markup, no emoji codes, no guessed highlighting."""
    return Console(stderr=stderr, width=width, markup=False, emoji=False, highlight=False)


out = plain_console()
err = plain_console(stderr=True)


def fail(message: str, code: ExitCode = ExitCode.BAD_INPUT) -> NoReturn:
    """Say what is wrong on stderr, in one paragraph, and exit with ``code``."""
    err.print(Text.assemble(("error: ", "bold red"), message), soft_wrap=True)
    raise typer.Exit(code)


def warn(message: str) -> None:
    err.print(Text.assemble(("warning: ", "yellow"), message), soft_wrap=True)


def note(message: str) -> None:
    """A line for the person at the terminal, on stderr (stdout is the result)."""
    err.print(message, soft_wrap=True)


#: The cycle collector's thresholds while a command runs. An investigation makes millions of small
#: objects (a recording's records, span times, stats) and frees few of them before it ends; at the
#: default (a young collection every 700 allocations) the collector rescanned them so often that it
#: cost a large system a sixth of its CPU time. Memory freed by reference counting is unaffected.
COMMAND_GC_THRESHOLD = (100_000, 50, 100)


@contextmanager
def few_collections() -> Iterator[None]:
    old = gc.get_threshold()
    gc.set_threshold(*COMMAND_GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*old)


def run(coro_fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a command's coroutine; a :class:`UserError` from inside it is said and exits 2."""
    result: list[T] = []

    async def main() -> None:
        # the result stays out of the main task: on Python 3.11 asyncio.run reprs that task (with its
        # result) as it restores the SIGINT handler, and a large system's report took a second to repr
        result.append(await coro_fn())

    try:
        with few_collections():
            asyncio.run(main())
    except UserError as exc:
        fail(str(exc))
    return result[0]


def wide() -> Console:
    """Tables piped to a file or another program are not folded to 80 columns."""
    return out if out.is_terminal else plain_console(width=200)


def settings() -> Settings:
    try:
        return load_settings()
    except UserError as exc:
        fail(str(exc))


@contextmanager
def store(config: Settings | None = None) -> Iterator[Store]:
    """The store, for a command about what it holds (lessons, investigations, feedback): one that
    cannot be opened or read, then or in the middle of the command, is a clear error and exit 2."""
    config = config or settings()
    try:
        with Store(config.store) as opened:
            yield opened
    except StoreError as exc:
        fail(str(exc))


def writable(path: Path, option: str) -> None:
    """An output file can be written, checked before the work it is for runs (opened for
    appending, which changes nothing; removed again if it did not exist)."""
    problem = None
    if path.is_dir():
        problem = "is a directory"
    else:
        existed = path.exists()
        try:
            with path.open("a", encoding="utf-8"):
                pass
        except OSError as exc:
            problem = f"cannot be written: {exc.strerror or exc}"
        else:
            if not existed:
                path.unlink(missing_ok=True)
    if problem is not None:
        fail(f"{option} {path} {problem}")


def deliver(text: str, to: Path | None, option: str) -> None:
    """A command's output: to stdout, or to the file ``option`` names (exit 1 if it cannot be written)."""
    if to is None:
        sys.stdout.write(text)
        return
    if not write_text(to, text, option):
        raise typer.Exit(ExitCode.INTERNAL)
    out.print(f"wrote {to}")


def write_text(path: Path, text: str, option: str) -> bool:
    """Write an output file; False (said on stderr) when it cannot be written after all."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        err.print(Text.assemble(("error: ", "bold red"), f"{option} {path}: {exc}"), soft_wrap=True)
        return False
    return True
