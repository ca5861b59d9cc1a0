"""Changes from a GitOps / config repository, through the git command line.

A changes *reader* (:class:`opsagent.sources.readers.ChangesReader`): the commits that landed in a time
range (committer date), each mapped to the services it touches by path rules, with its diff stat
and the changed lines of its config files; a change of an image tag reads as a deploy with its
from and to versions. Read-only: ``git log`` and ``git show`` on a clone kept fresh by someone else
(it never fetches, checks out or writes). The command runner is injected; its errors are
translated here, once.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fnmatch import fnmatch
from pathlib import Path
from urllib.parse import urlsplit

from adapters.boundary import MALFORMED, ErrorTable, translate
from adapters.changes_git.config import CONFIG_FILES, ChangeKind, PathRule
from opsagent.errors import MalformedResponse, SourceTimeout, SourceUnavailable
from opsagent.fixtures import Change

Git = Callable[[Sequence[str]], Awaitable[str]]

#: subprocess/OS exceptions, most specific first.
ERRORS: ErrorTable = (
    (subprocess.TimeoutExpired, SourceTimeout),
    (TimeoutError, SourceTimeout),
    (subprocess.CalledProcessError, SourceUnavailable),  # not a repository, unknown ref
    (subprocess.SubprocessError, SourceUnavailable),
    (UnicodeDecodeError, MalformedResponse),
    (OSError, SourceUnavailable),  # git not installed, repository not readable
    *MALFORMED,
)

_MAX_DIFF_LINES = 40
_IMAGE = re.compile(r"^[-+]\s*(?:-\s*)?(?:image|newTag|tag):\s*['\"]?([^\s'\"]+)")
_REPLICAS = re.compile(r"^[-+]\s*replicas:")
_FLAG = re.compile(r"flag|feature", re.I)
_RECORD, _FIELD = "\x1e", "\x1f"


def git_cli(repo: Path, *, timeout_s: float = 10.0) -> Git:
    """Runs ``git -C repo ...`` read-only commands; raises what subprocess would."""

    async def run(args: Sequence[str]) -> str:
        process = await asyncio.create_subprocess_exec(
            "git",
            "-C",
            str(repo),
            "--no-pager",
            "-c",
            "core.quotepath=off",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), timeout=timeout_s)
        except TimeoutError as exc:
            process.kill()
            await process.wait()
            raise subprocess.TimeoutExpired(["git", *args], timeout_s) from exc
        except asyncio.CancelledError:  # the tool call's time ran out: no git is left running behind it
            process.kill()
            raise
        if process.returncode != 0:
            raise subprocess.CalledProcessError(process.returncode or 1, ["git", *args], out, err)
        return out.decode("utf-8")

    return run


@dataclass
class _Commit:
    sha: str
    when: datetime
    author: str
    subject: str
    files: list[tuple[int, int, str]] = field(default_factory=list)


class GitChangesReader:
    def __init__(
        self,
        git: Git,
        *,
        name: str,
        rules: Sequence[PathRule],
        ref: str = "HEAD",
        config_files: Sequence[str] = CONFIG_FILES,
        commit_url: str | None = None,
    ) -> None:
        self.git = git
        self.name = f"changes:{name}"
        self.rules = list(rules)
        self.ref = ref
        self.config_files = tuple(config_files)
        self.commit_url = commit_url  # None: derived from the origin remote on first use

    async def _commit_url(self) -> str | None:
        if self.commit_url is None:
            try:
                remote = await self.git(["config", "--get", "remote.origin.url"])
            except (subprocess.SubprocessError, OSError, TimeoutError):  # no origin (a local clone): no links
                remote = ""
            self.commit_url = commit_url_template(remote.strip()) or ""
        return self.commit_url or None

    async def _run(self, args: Sequence[str], *, window: tuple[datetime, datetime] | None = None) -> str:
        try:
            return await self.git(args)
        except subprocess.CalledProcessError as exc:
            stderr = exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else str(exc.stderr or "")
            raise SourceUnavailable(
                f"git {args[0]} failed: {stderr.strip() or exc}", source=self.name, query=" ".join(args), window=window
            ) from exc
        except Exception as exc:
            raise translate(exc, ERRORS, source=self.name, query=" ".join(args), window=window) from exc

    async def changes(self, *, start: datetime, end: datetime, service: str | None) -> list[Change]:
        window = (start, end)
        text = await self._run(
            [
                "log",
                self.ref,
                f"--since={start.isoformat()}",
                f"--until={end.isoformat()}",
                f"--format={_RECORD}%H{_FIELD}%cI{_FIELD}%an <%ae>{_FIELD}%s",
                "--numstat",
                "--no-renames",
            ],
            window=window,
        )
        try:
            commits = _commits(text)
        except ValueError as exc:
            raise MalformedResponse(f"unexpected git log output: {exc}", source=self.name, window=window) from exc
        out: list[Change] = []
        for commit in commits:
            if not start <= commit.when < end:
                continue
            touched = self._services(commit)
            if service is not None:
                touched = {s: files for s, files in touched.items() if s == service}
            for svc, (files, kind) in sorted(touched.items()):
                out.append(await self._change(commit, svc, files, kind, several=len(touched) > 1, window=window))
        return out

    def _services(self, commit: _Commit) -> dict[str, tuple[list[tuple[int, int, str]], ChangeKind | None]]:
        touched: dict[str, tuple[list[tuple[int, int, str]], ChangeKind | None]] = {}
        for entry in commit.files:
            for rule in self.rules:
                svc = rule.match(entry[2])
                if svc:
                    files, kind = touched.get(svc, ([], rule.kind))
                    files.append(entry)
                    touched[svc] = (files, kind or rule.kind)
                    break
        return touched

    async def _change(
        self,
        commit: _Commit,
        service: str,
        files: list[tuple[int, int, str]],
        kind: ChangeKind | None,
        *,
        several: bool,
        window: tuple[datetime, datetime],
    ) -> Change:
        config = [p for _, _, p in files if any(fnmatch(p.rsplit("/", 1)[-1], g) for g in self.config_files)]
        lines: list[str] = []
        if config:
            shown = await self._run(
                ["show", "--format=", "--unified=0", "--no-color", commit.sha, "--", *config], window=window
            )
            lines = [line for line in shown.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
        added = sum(a for a, _, _ in files)
        deleted = sum(d for _, d, _ in files)
        stat = f"{len(files)} file(s) changed, +{added} -{deleted}: " + ", ".join(p for _, _, p in files[:10])
        diff = "\n".join([stat, *lines[:_MAX_DIFF_LINES]])
        if len(lines) > _MAX_DIFF_LINES:
            diff += f"\n… {len(lines) - _MAX_DIFF_LINES} more changed line(s)"
        template = await self._commit_url()
        before = [m.group(1) for line in lines if line.startswith("-") and (m := _IMAGE.match(line))]
        after = [m.group(1) for line in lines if line.startswith("+") and (m := _IMAGE.match(line))]
        return Change(
            id=f"{commit.sha[:12]}:{service}" if several else commit.sha[:12],
            ts=commit.when,
            service=service,
            kind=kind or _kind(lines, commit.subject, bool(after)),
            summary=commit.subject,
            from_version=_version(before[0]) if before else None,
            to_version=_version(after[0]) if after else None,
            author=commit.author,
            diff=diff,
            url=template.replace("{sha}", commit.sha) if template else None,
        )


_SCP_REMOTE = re.compile(r"^(?:[\w.-]+@)?(?P<host>[\w.-]+):(?P<path>[^/].*)$")  # git@host:org/repo.git


def commit_url_template(remote: str) -> str | None:
    """A commit page URL template ({sha}) for a clone's origin remote, on the forges whose layout is
    known; None for a remote that is not on the web. Credentials in the remote are never kept."""
    if not remote:
        return None
    parts = urlsplit(remote)
    if parts.scheme in ("http", "https", "ssh", "git") and parts.hostname:
        host, path = parts.hostname, parts.path
    elif (m := _SCP_REMOTE.match(remote)) is not None:
        host, path = m.group("host"), "/" + m.group("path")
    else:
        return None  # a local path
    path = path.rstrip("/").removesuffix(".git")
    if not path.strip("/"):
        return None
    commit = "/-/commit/" if "gitlab" in host else "/commits/" if "bitbucket" in host else "/commit/"
    return f"https://{host}{path}{commit}{{sha}}"


def _kind(lines: list[str], subject: str, new_image: bool) -> ChangeKind:
    if new_image:
        return "deploy"
    if any(_REPLICAS.match(line) for line in lines):
        return "scale"
    if _FLAG.search(subject):
        return "flag"
    return "config"


def _version(image: str) -> str:
    """``registry/app:1.4.2`` -> ``1.4.2``; a bare tag stays as it is."""
    return image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else image


def _commits(text: str) -> list[_Commit]:
    out = []
    for chunk in text.split(_RECORD):
        if not chunk.strip():
            continue
        header, _, rest = chunk.partition("\n")
        sha, when, author, subject = header.split(_FIELD, 3)
        commit = _Commit(sha=sha, when=datetime.fromisoformat(when), author=author, subject=subject)
        for line in rest.splitlines():
            parts = line.split("\t", 2)
            if len(parts) == 3:
                added, deleted, path = parts
                commit.files.append(
                    (int(added) if added.isdigit() else 0, int(deleted) if deleted.isdigit() else 0, path)
                )
        out.append(commit)
    return out
