"""The live view of an investigation on a terminal: the hypothesis tree, redrawn as it grows.

It listens to the investigation's events (:data:`opsagent.loop.Event`) through a
:class:`opsagent.search.SearchRecorder`, the same one the report's tree is built with, and draws
triage, the k proposals with their scores, the beams, each hypothesis's calls as they run, the
verdicts, backtracking and what lessons held back.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console, RenderableType
from rich.live import Live

from opsagent.loop import Event
from opsagent.models import SearchTree
from opsagent.report import search_tree
from opsagent.search import SearchRecorder


class LiveTree:
    """A listener that redraws the search tree on ``console``; start and stop :attr:`live` around
    the investigation."""

    def __init__(self, console: Console, *, title: str = "opsagent", clock: Callable[[], float] = time.monotonic):
        self.title = title
        self.clock = clock
        self.started = clock()
        self.recorder = SearchRecorder()
        self._tree: SearchTree = self.recorder.tree()
        # transient: once done, the report (which holds the same tree, collapsed) takes its place
        self.live = Live(console=console, get_renderable=self.renderable, refresh_per_second=8, transient=True)

    def __call__(self, event: Event) -> None:
        self.recorder(event)
        self._tree = self.recorder.tree()  # one snapshot: the refresh thread never sees it half-built

    def renderable(self) -> RenderableType:
        elapsed = self.clock() - self.started
        return search_tree(
            self._tree, title=f"{self.title} · {elapsed:.1f} s", steps=True, triaging=not self.recorder.triaged
        )
