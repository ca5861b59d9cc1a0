"""The project's exception tree.

Foreign exceptions (httpx, elasticsearch, OSError, yaml, pydantic) are translated once, at the
boundary where they enter, with ``raise ... from exc``. Errors carry their context as attributes
and never log in their constructor.

    OpsAgentError
    ├── UserError                  stops the run; the message tells the user what to fix
    │   ├── ConfigError            bad configuration or unknown option value (e.g. strategy)
    │   ├── PlaybookError          a playbook file that does not validate (file, field)
    │   ├── FixtureError           a recorded incident that does not validate (file, line, field)
    │   └── AlertError             an alert file or payload that does not validate
    └── SourceError                a data source failed; the investigation goes on without it
        ├── SourceUnavailable      could not connect / refused / missing data
        │   └── SourceAuthFailed   the source refused our credentials (401/403)
        ├── SourceTimeout          the call took longer than its per-call timeout
        ├── QueryRejected          the source understood the call and refused it (bad query)
        │   └── NotReadOnly        refused before sending: not a read (Kubernetes: only get/list/watch)
        ├── MalformedResponse      the source answered something that is not what its API promises
        └── AnswerTooLarge         the answer passed its size cap (bytes, pages): reading stopped there

``SourceError`` is what the tool layer turns into an observation that names the source; a
``UserError`` aborts with a clear message and never a traceback. A source error's text is a
foreign system's (an upstream may echo the request's ``Authorization`` header in its error body):
it is redacted as the error is made, so whoever prints, logs or stores it leaks nothing. An error
for several instances of one kind that all failed names each in ``instances``. Live adapters map their client's
exceptions (httpx, requests, elasticsearch/elastic-transport, subprocess) with ``raise ... from exc``
in one function per adapter, and carry the query and time window that failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from opsagent.redaction import scrub


class OpsAgentError(Exception):
    """Root of every error this project raises on purpose."""


class UserError(OpsAgentError):
    """An error the user fixes: bad input, bad configuration."""


class ConfigError(UserError):
    pass


@dataclass(frozen=True)
class Problem:
    """One validation problem: where it is and what is wrong."""

    file: str
    message: str
    line: int | None = None
    field: str | None = None

    def __str__(self) -> str:
        where = self.file + (f":{self.line}" if self.line is not None else "")
        at = f" [{self.field}]" if self.field else ""
        return f"{where}{at}: {self.message}"


def _listing(what: str, problems: list[Problem]) -> str:
    """One problem on one line (``invalid alert: --at: …``); several, one a line under the heading."""
    if len(problems) == 1:
        return f"{what}: {problems[0]}"
    return f"{what}:\n" + "\n".join(f"  {p}" for p in problems)


class PlaybookError(UserError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__(_listing("invalid playbook", problems))


class FixtureError(UserError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__(_listing("invalid recorded incident", problems))


class AlertError(UserError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__(_listing("invalid alert", problems))


class SourceError(OpsAgentError):
    """A data source failed. ``source`` names it (e.g. ``metrics:replay``); ``instances`` holds the
    error of each instance when several of one kind failed together; ``status`` the HTTP status it
    answered with, if it answered."""

    def __init__(
        self,
        message: str,
        *,
        source: str,
        query: str | None = None,
        window: tuple[datetime, datetime] | None = None,
        instances: Sequence[SourceError] = (),
        status: int | None = None,
    ) -> None:
        self.source = source
        #: the HTTP status the source answered with, when it answered (so "answered 500" is told
        #: apart from "could not be reached")
        self.status = status
        self.query = scrub(query) if query is not None else None
        self.window = window
        self.instances = tuple(instances)
        super().__init__(scrub(message))


class SourceUnavailable(SourceError):
    pass


class SourceTimeout(SourceError):
    pass


class QueryRejected(SourceError):
    pass


class NotReadOnly(QueryRejected):
    """A request that is not a read, or reads what opsagent has no business reading, stopped before it
    left the process (the Kubernetes client's guard: only get/list/watch of the resources it needs)."""


class SourceAuthFailed(SourceUnavailable):
    """The source refused the credentials (or their absence): a configuration problem."""


class MalformedResponse(SourceError):
    """The source answered, but not in the shape its API documents."""


class AnswerTooLarge(SourceError):
    """The source's answer passed a cap (``limit``, in what ``unit`` says: bytes, pages) and reading
    stopped there, so memory stays bounded whatever an upstream sends. ``partial`` holds what was read
    before the cap where a reader can use it (a Kubernetes list's first pages)."""

    def __init__(
        self,
        message: str,
        *,
        source: str,
        limit: int = 0,
        unit: str = "bytes",
        partial: Sequence[object] = (),
        query: str | None = None,
        window: tuple[datetime, datetime] | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message, source=source, query=query, window=window, status=status)
        self.limit = limit
        self.unit = unit
        self.partial = tuple(partial)
