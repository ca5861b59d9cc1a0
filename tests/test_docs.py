"""The docs site: built with ``mkdocs build --strict`` (a broken link or a page missing from the
nav fails), and its generated pages (CLI and configuration reference, the service's OpenAPI schema,
the picture of the modules and their imports) are what the code says today."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import ROOT


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_builds_strict_with_no_broken_link(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()
    # fixtures/FORMAT.md is included into the site, not copied: the taxonomy is there
    assert "db_pool_exhaustion" in (tmp_path / "site" / "fixtures" / "index.html").read_text(encoding="utf-8")


def test_the_generated_pages_are_what_the_code_says() -> None:
    checked = subprocess.run(
        [sys.executable, "docs/generate.py", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert checked.returncode == 0, checked.stderr


def test_the_check_names_a_page_the_code_has_moved_past(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    generate = _generator()
    page = tmp_path / "reference.md"
    page.write_text("# what the code said yesterday\n", encoding="utf-8")
    monkeypatch.setattr(generate, "ROOT", tmp_path)
    monkeypatch.setattr(generate, "pages", lambda: {page: lambda: "# what the code says today\n"})
    assert generate.main(["--check"]) == 1
    assert "reference.md" in capsys.readouterr().err
    assert generate.main([]) == 0 and page.read_text(encoding="utf-8") == "# what the code says today\n"


def test_the_cli_reference_holds_every_command_and_option() -> None:
    reference = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    for heading in ("## `opsagent investigate`", "## `opsagent lessons export`", "## `opsagent serve`"):
        assert heading in reference
    assert "| `--token-budget` | `40000` |" in reference


def test_the_configuration_reference_holds_every_setting_with_its_variable() -> None:
    from opsagent.settings import Settings

    reference = (ROOT / "docs" / "reference" / "configuration.md").read_text(encoding="utf-8")
    for name in Settings.model_fields:
        assert f"| `{name}` | `OPSAGENT_{name.upper()}` |" in reference
    assert "`OPSAGENT_LLM__MODEL`" in reference


def test_the_module_picture_follows_the_imports(tmp_path: Path) -> None:
    generate = _generator()
    (tmp_path / "opsagent" / "service").mkdir(parents=True)
    (tmp_path / "adapters").mkdir()
    (tmp_path / "opsagent" / "__init__.py").write_text("")
    (tmp_path / "opsagent" / "judge.py").write_text("from opsagent.models import Verdict\n")
    (tmp_path / "opsagent" / "models.py").write_text("import json\n")
    (tmp_path / "opsagent" / "service" / "__init__.py").write_text("")
    (tmp_path / "opsagent" / "service" / "app.py").write_text("from ..judge import judge\nimport adapters.prometheus\n")
    (tmp_path / "adapters" / "prometheus.py").write_text("from opsagent import models\n")
    graph = generate.module_imports(tmp_path)
    assert graph == {
        "opsagent.judge": {"opsagent.models"},
        "opsagent.models": set(),
        "opsagent.service": {"opsagent.judge", "adapters.prometheus"},
        "adapters.prometheus": {"opsagent.models"},
    }
    section = generate.modules_section(graph)
    assert "opsagent_service --> adapters_prometheus" in section


#: A section of figures someone measured: a heading that says so ("Measured", "Figures", "Results").
MEASURED = re.compile(r"^(#{2,4}) .*\b(measured|figures|results)\b", re.IGNORECASE)
#: A commit as the pages cite one: 7 to 40 hex digits, letters and digits both (not a plain number).
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def _stale_sections(text: str) -> list[str]:
    """The headings of sections of measured figures that do not say which commit they were recorded at."""
    lines = text.split("\n")
    missing = []
    for i, line in enumerate(lines):
        found = MEASURED.match(line)
        if found is None:
            continue
        end = next(
            (j for j in range(i + 1, len(lines)) if re.match(rf"^#{{1,{len(found.group(1))}}} ", lines[j])),
            len(lines),
        )
        if not COMMIT.search("\n".join(lines[i:end])):
            missing.append(line)
    return missing


def _results_pages() -> list[Path]:
    return [p for p in sorted((ROOT / "docs").rglob("*.md")) if "reference" not in p.relative_to(ROOT / "docs").parts]


def test_every_section_of_measured_figures_says_the_commit_it_was_recorded_at() -> None:
    missing = {str(p.relative_to(ROOT)): _stale_sections(p.read_text(encoding="utf-8")) for p in _results_pages()}
    assert {page: headings for page, headings in missing.items() if headings} == {}
    unnamed = [p.name for p in sorted((ROOT / "docs" / "benchmarks").glob("*.md")) if not COMMIT.search(p.read_text())]
    assert unnamed == []  # a results page says the commit its figures are from


def test_a_measured_section_without_a_commit_is_named() -> None:
    page = (
        "# P\n\n## Measured\n\n| what | figure |\n|---|---|\n| p99 | 40 ms (2026-12-01) |\n\n## Next\n\nat `1d0cf05`\n"
    )
    assert _stale_sections(page) == ["## Measured"]
    assert _stale_sections(page.replace("(2026-12-01)", "(at `c5ad8ca`)")) == []
