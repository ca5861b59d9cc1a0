"""Knowledge shipped with opsagent: the playbooks, the recorded-incident JSON Schemas and the demo incident.

The repository keeps them where people edit them (``playbooks/``, ``fixtures/schema/``,
``fixtures/incidents/``); the wheel carries copies inside the package (``opsagent/playbooks`` …,
mapped by hatch's ``force-include`` in ``pyproject.toml``) so that an installed opsagent starts with
its knowledge. Each is found through :mod:`importlib.resources` first, then in the checkout when
running from source. The signal catalogs already live in the package (``opsagent/data``,
:func:`opsagent.catalog.packaged_signals`). This module only finds directories; it reads nothing.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent

#: The recorded incident ``opsagent demo`` replays (the same one ``make demo`` does).
DEMO_INCIDENT = "order-service-threadpool-config"


def _shipped(inside: str, checkout: str) -> Path:
    """A directory of the installed package, else the checkout's (where a broken install, missing both,
    is reported by whoever reads it: "no playbooks found in …")."""
    packaged = resources.files("opsagent").joinpath(inside)
    if packaged.is_dir():
        # pip installs wheels unpacked on disk, so the resource is a real directory.
        return Path(str(packaged))
    return _CHECKOUT / checkout


def playbooks_dir() -> Path:
    """The playbooks opsagent ships (``--playbooks`` / ``OPSAGENT_PLAYBOOKS_DIR`` override them)."""
    return _shipped("playbooks", "playbooks")


def schema_dir() -> Path:
    """The JSON Schemas of the recorded-incident format (``opsagent fixtures schema`` regenerates them)."""
    return _shipped("schema", "fixtures/schema")


def demo_incident() -> Path:
    """The recorded incident the demo replays."""
    return _shipped(f"examples/{DEMO_INCIDENT}", f"fixtures/incidents/{DEMO_INCIDENT}")
