"""The wheel, as a user gets it: built, installed into a fresh virtual environment outside the
checkout, and run from there. The playbooks, schemas and demo incident must come from the installed
package, never from the repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from opsagent.fixtures import json_schemas
from opsagent.packaged import demo_incident, playbooks_dir, schema_dir

ROOT = Path(__file__).resolve().parent.parent


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(the wheel, the venv's bin directory, an environment that cannot see the checkout)."""
    base = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "OPSAGENT_CONFIG")}
    env["HOME"] = str(base)  # no user config, a data directory of its own
    out = base / "dist"
    _run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(out)], cwd=base, env=env)
    (wheel,) = out.glob("*.whl")
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=base, env=env)
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], cwd=base, env=env, timeout=600)
    return wheel, venv / "bin", env


def test_the_distribution_name_is_not_the_taken_one_and_the_command_stays_opsagent() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["name"] == "opsagent-rca"  # `opsagent` on the public index is an unrelated 2019 package
    assert meta["scripts"] == {"opsagent": "opsagent.cli:app"}


def test_the_wheel_carries_playbooks_schemas_catalogs_and_the_demo_incident(
    installed: tuple[Path, Path, dict[str, str]],
) -> None:
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {p.name for p in (ROOT / "playbooks").glob("*.yaml")}
    assert {f"opsagent/playbooks/{n}" for n in shipped} <= names
    assert {f"opsagent/schema/{p.name}" for p in (ROOT / "fixtures" / "schema").glob("*.json")} <= names
    assert {"opsagent/data/signals.yaml", "opsagent/data/signals_live.yaml", "opsagent/llm/data/prompts.yaml"} <= names
    assert "opsagent/examples/order-service-threadpool-config/incident.yaml" in names
    migrations = {f"opsagent/store/migrations/{p.name}" for p in (ROOT / "opsagent/store/migrations").glob("*.sql")}
    assert migrations and migrations <= names  # the store's schema, for a fresh database
    assert not any(n.startswith(("tests/", "fixtures/", "benchmarks/")) for n in names)


def test_the_installed_package_runs_the_demo_from_its_own_files(installed: tuple[Path, Path, dict[str, str]]) -> None:
    _, bin_dir, env = installed
    elsewhere = bin_dir.parent.parent  # outside the checkout: nothing there to fall back on
    where = _run(
        [
            str(bin_dir / "python"),
            "-c",
            "from opsagent.packaged import playbooks_dir, schema_dir, demo_incident; "
            "print(playbooks_dir()); print(schema_dir()); print(demo_incident())",
        ],
        cwd=elsewhere,
        env=env,
    ).stdout.split()
    site = str(bin_dir.parent / "lib")
    assert all(w.startswith(site) for w in where), where

    checked = _run([str(bin_dir / "opsagent"), "playbooks", "check"], cwd=elsewhere, env=env).stdout
    assert f"valid in {site}" in checked.replace("\n", "")

    demo = _run([str(bin_dir / "opsagent"), "demo", "--json"], cwd=elsewhere, env=env).stdout
    report = json.loads(demo)
    assert report["status"] == "confirmed"
    assert (report["root_cause"]["component"], report["root_cause"]["kind"]) == ("order-service", "config_change")


def test_from_a_checkout_the_repository_directories_are_used() -> None:
    # The editable install has no copies inside the package: the sources of truth are read in place.
    assert playbooks_dir() == ROOT / "playbooks"
    assert schema_dir() == ROOT / "fixtures" / "schema"
    assert demo_incident() == ROOT / "fixtures" / "incidents" / "order-service-threadpool-config"


def test_the_shipped_schemas_are_the_ones_the_models_generate() -> None:
    for name, schema in json_schemas().items():
        path = schema_dir() / f"{name.split('.')[0]}.schema.json"
        assert json.loads(path.read_text()) == schema, f"{path} is stale: run opsagent fixtures schema"
