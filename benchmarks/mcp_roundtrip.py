"""Time an MCP round trip with the SDK's own client: connect (initialize), list tools, investigate
the demo incident, read its report as a resource.

    python benchmarks/mcp_roundtrip.py [--repeat N]

Two transports: ``opsagent mcp`` as a stdio subprocess (process start included, as an assistant
pays it) and the server in-process. Prints the median and max wall time of each step over N runs,
each with a fresh data directory.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcp import Client, StdioServerParameters  # noqa: E402

from opsagent.logconfig import configure  # noqa: E402
from opsagent.mcpserver import DEMO, build_server  # noqa: E402
from opsagent.settings import Settings  # noqa: E402

STEPS = ("connect", "list_tools", "investigate", "read_report", "total")


async def one(make: Callable[[Path], Any], data: Path) -> dict[str, float]:
    times: dict[str, float] = {}
    t0 = mark = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        times[step], mark = now - mark, now

    async with Client(make(data)) as client:
        lap("connect")
        await client.list_tools()
        lap("list_tools")
        result = await client.call_tool("investigate", {"incident": DEMO})
        lap("investigate")
        await client.read_resource(result.structured_content["report_uri"])
        lap("read_report")
    times["total"] = time.perf_counter() - t0
    return times


def stdio(data: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=str(Path(sys.executable).with_name("opsagent")),
        args=["mcp"],
        env={**os.environ, "OPSAGENT_DATA_DIR": str(data)},
    )


def in_process(data: Path) -> Any:
    return build_server(Settings(data_dir=data))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    configure(level="error")
    for name, make in (("stdio subprocess", stdio), ("in-process", in_process)):
        runs = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(asyncio.run(one(make, Path(tmp))))
        cells = "  ".join(
            f"{s} {median(r[s] for r in runs) * 1000:.0f}/{max(r[s] for r in runs) * 1000:.0f} ms" for s in STEPS
        )
        print(f"{name:17} (median/max of {args.repeat})  {cells}")


if __name__ == "__main__":
    main()
