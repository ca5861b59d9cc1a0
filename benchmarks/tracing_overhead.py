"""The CPU cost of tracing investigations: the recorded corpus replayed with tracing off and on,
interleaved (off, on, on, off, …) so drift in a shared machine's speed falls on both alike.

    python benchmarks/tracing_overhead.py [fixtures/incidents] [--rounds N]

"on" is what a configured deployment runs: the SDK's tracer provider with its batch processor,
every span encoded to OTLP protobuf as the OTLP/HTTP exporter would send it; the bytes are dropped
instead of posted, so the figure is opsagent's cost, not a collector's. CPU time is the process's
(all threads: the batch processor exports from its own). Prints the median CPU seconds per replay
of the corpus each way, the overhead, and the spans per replay.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402

from opsagent import tracing  # noqa: E402
from opsagent.logconfig import configure  # noqa: E402
from opsagent.plan import load_default_playbooks  # noqa: E402
from opsagent.scoreboard import replay  # noqa: E402


class EncodingExporter(SpanExporter):
    """Encodes spans as the OTLP exporter does, then drops them."""

    def __init__(self) -> None:
        self.spans = 0
        self.bytes = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        self.bytes += len(encode_spans(spans).SerializeToString())
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def one(directory: Path, traced: bool) -> tuple[float, int]:
    books = load_default_playbooks()
    untraced = tracing.tracer
    exporter = EncodingExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    if traced:
        tracing.tracer = lambda: provider.get_tracer(tracing.TRACER_NAME)  # type: ignore[assignment]
    try:
        start = time.process_time()
        board = asyncio.run(replay(directory, playbooks=books))
        provider.force_flush()
        cpu = time.process_time() - start
    finally:
        tracing.tracer = untraced  # type: ignore[assignment]
        provider.shutdown()
    if board.ac(1) != 1.0:
        raise SystemExit(f"the corpus no longer replays at AC@1 1.000 ({board.ac(1):.3f})")
    return cpu, exporter.spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path, default=ROOT / "fixtures" / "incidents")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    configure(level="error")
    one(args.directory, False)  # warm-up: imports, playbooks, caches
    off: list[float] = []
    on: list[float] = []
    spans = 0
    for i in range(args.rounds):
        order = (False, True) if i % 2 == 0 else (True, False)
        for traced in order:
            cpu, n = one(args.directory, traced)
            (on if traced else off).append(cpu)
            spans = max(spans, n)
    m_off, m_on = median(off), median(on)
    print(f"off: median {m_off:.2f} s CPU per corpus replay ({', '.join(f'{x:.2f}' for x in off)})")
    print(f"on:  median {m_on:.2f} s CPU per corpus replay ({', '.join(f'{x:.2f}' for x in on)})")
    print(
        f"overhead {100 * (m_on - m_off) / m_off:+.1f}%  ({spans} spans per replay, {args.rounds} rounds interleaved)"
    )


if __name__ == "__main__":
    main()
