"""The README's commands run as written. Every ``sh`` block in README.md carries a marker on the
line before it: ``<!-- test: run -->`` (run here, each command must succeed), ``<!-- test: server
(...) -->`` (starts the service: run on a free port in place of 8080, and stopped at the end), or
``<!-- test: skip (reason) -->`` (needs something this machine does not have, said in the reason).
A README command that stops working fails the suite; an unmarked block fails it too."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

MARKER = re.compile(r"^<!-- test: (run|server|skip)(?: \((.+)\))? -->$")


@dataclass(frozen=True)
class Block:
    line: int  # where the fence opens, 1-based
    mode: str
    reason: str
    text: str


def shell_blocks(readme: str) -> list[Block]:
    lines = readme.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() in ("```sh", "```bash", "```console"):
            start = i
            i += 1
            while lines[i].strip() != "```":
                i += 1
            marker = MARKER.match(lines[start - 1].strip()) if start else None
            mode, reason = (marker.group(1), marker.group(2) or "") if marker else ("unmarked", "")
            blocks.append(Block(start + 1, mode, reason, "\n".join(lines[start + 1 : i])))
        i += 1
    return blocks


BLOCKS = shell_blocks((ROOT / "README.md").read_text(encoding="utf-8"))


def test_every_shell_block_says_how_it_is_checked() -> None:
    unmarked = [b.line for b in BLOCKS if b.mode == "unmarked"]
    assert unmarked == [], f"README.md shell blocks without a <!-- test: ... --> marker at lines {unmarked}"
    assert all(b.reason for b in BLOCKS if b.mode != "run"), "a skipped or server block says why"
    assert sum(b.mode == "run" for b in BLOCKS) >= 2 and any(b.mode == "server" for b in BLOCKS)


def test_an_unmarked_block_is_found() -> None:
    found = shell_blocks("text\n```sh\nmake demo\n```\n<!-- test: skip (no) -->\n```sh\nrm -rf /\n```\n")
    assert [(b.line, b.mode) for b in found] == [(2, "unmarked"), (6, "skip")]


def _workdir(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A directory that looks like the top of the clone (its Makefile, .venv, fixtures, docs), so that
    files the README's commands write land in a temporary directory and the store is a fresh one."""
    work = tmp_path / "clone"
    work.mkdir()
    for name in ("Makefile", "pyproject.toml", ".venv", "fixtures", "playbooks", "docs"):
        (work / name).symlink_to(ROOT / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPSAGENT_")}
    env.update({"OPSAGENT_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "100", "HOME": str(tmp_path)})
    return work, env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(b, id=f"line{b.line}", marks=[pytest.mark.skip(reason=b.reason)] if b.mode == "skip" else [])
        for b in BLOCKS
        if b.mode in ("run", "skip")
    ],
)
def test_a_runnable_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    work, env = _workdir(tmp_path)
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block.text],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, f"README.md line {block.line} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("block", [pytest.param(b, id=f"line{b.line}") for b in BLOCKS if b.mode == "server"])
def test_the_service_block_accepts_the_notification_it_shows(block: Block, tmp_path: Path) -> None:
    work, env = _workdir(tmp_path)
    port = _free_port()
    env["OPSAGENT_PORT"] = str(port)
    script = "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + block.text.replace(":8080", f":{port}")
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, f"README.md line {block.line} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert '"action":"opened"' in done.stdout and "/incidents/inc-" in done.stdout
