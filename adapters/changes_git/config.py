"""A git repository's configuration as a change source: the clone, and which paths belong to which service.

Models only: no client is imported here, so loading settings stays cheap; secrets come from the
environment (:mod:`adapters.baseconfig`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from adapters.baseconfig import Kind, SourceConfig

ChangeKind = Literal["deploy", "rollout", "config", "flag", "infra", "scale"]


#: Files whose changed lines are worth showing whole: configuration, not code.
CONFIG_FILES = ("*.yaml", "*.yml", "*.json", "*.properties", "*.toml", "*.ini", "*.env", "*.conf", "*.tf", "*.hcl")


class PathRule(BaseModel):
    """Files matching ``pattern`` belong to a service: ``{service}`` in the pattern captures it
    (``apps/{service}/**``), or ``service`` names it (``infra/**`` -> platform)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pattern: str
    service: str | None = None
    kind: ChangeKind | None = None

    def match(self, path: str) -> str | None:
        found = _compiled(self.pattern).fullmatch(path)
        if found is None:
            return None
        return found.groupdict().get("service") or self.service


def _compiled(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("{service}", i):
            out += r"(?P<service>[^/]+)"
            i += len("{service}")
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out)


class GitConfig(SourceConfig):
    kind: Kind = "git"
    path: Path = Field(description="a clone of the GitOps/config repository, kept fresh by someone else")
    ref: str = "HEAD"
    rules: list[PathRule] = Field(min_length=1, description="which paths belong to which service")
    config_files: list[str] = Field(default_factory=lambda: list(CONFIG_FILES))
    commit_url: str | None = Field(
        default=None,
        description="a commit's page, {sha} standing for its hash; by default derived from the origin remote "
        "(GitHub, GitLab, Bitbucket, Gitea)",
    )
