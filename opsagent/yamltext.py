"""YAML text as Python data, parsed by libyaml where PyYAML was built with it.

``yaml.safe_load`` parses in pure Python: a recorded incident's header with a few thousand topology
edges took a third of a second, and the playbooks a fifth on every investigation. The C parser
builds the same data (the constructor and the tag resolver are PyYAML's own, shared by both), and
raises the same :class:`yaml.YAMLError` subclasses with their marks. This module only parses.
"""

from __future__ import annotations

from typing import Any

import yaml

#: libyaml's parser with PyYAML's safe constructor; the pure-Python one where libyaml is absent.
SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """The one YAML document in ``text``, as ``yaml.safe_load`` reads it."""
    return yaml.load(text, Loader=SAFE_LOADER)
