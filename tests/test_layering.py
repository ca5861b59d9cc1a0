"""Adapters fetch, the engine computes: the engine reaches data sources through the protocols of
``opsagent.sources`` alone, and never imports an adapter. Only the application layer (the CLI, the
service, the MCP server, settings, doctor and record) builds adapters: an investigation's plan and its
run (``opsagent.plan``, ``opsagent.pipeline``) read through the sources alone."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

#: Modules that wire adapters to the engine; everything else in opsagent/ is the engine.
APPLICATION = {"cli", "doctor", "record", "settings", "service", "mcpserver"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_engine_modules_import_no_adapter() -> None:
    offenders = {}
    for path in sorted((ROOT / "opsagent").rglob("*.py")):
        parts = path.relative_to(ROOT / "opsagent").with_suffix("").parts
        if parts[0] in APPLICATION:
            continue
        bad = sorted(m for m in _imports(path) if m == "adapters" or m.startswith("adapters."))
        if bad:
            offenders[str(path.relative_to(ROOT))] = bad
    assert offenders == {}


def test_the_layering_test_sees_an_adapter_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from adapters.replay import replay_sources\nimport adapters.prometheus\n")
    assert _imports(probe) == {"adapters.replay", "adapters.prometheus"}
