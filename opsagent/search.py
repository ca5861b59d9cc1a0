"""The search as a tree, built from the events an investigation emits (:data:`opsagent.loop.Event`).

One :class:`SearchRecorder` listens to an investigation: the live view draws its tree as it grows,
and the report keeps the last one (:attr:`opsagent.models.Report.search`), so the tree on the
terminal, in Markdown and in HTML is the same. It only records what it is told; it decides nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from opsagent.loop import Beam, Concluded, Event, Listener, Proposed, Recalled, Started, StepTaken, Triaged
from opsagent.models import (
    Hypothesis,
    RankedComponent,
    RecalledLesson,
    SearchNode,
    SearchRound,
    SearchTree,
    SourceKind,
    StopReason,
    VerdictStatus,
)


@dataclass
class _Node:
    hypothesis: Hypothesis
    beam: int | None = None
    steps: list[str] = field(default_factory=list)
    status: VerdictStatus | None = None
    stop_reason: StopReason | None = None
    reason: str = ""

    def frozen(self) -> SearchNode:
        h = self.hypothesis
        return SearchNode(
            hypothesis_id=h.id,
            component=h.component,
            kind=h.kind,
            score=h.score,
            lesson_notes=list(h.lesson_notes),
            beam=self.beam,
            steps=list(self.steps),
            status=self.status,
            stop_reason=self.stop_reason,
            reason=self.reason,
        )


@dataclass
class SearchRecorder:
    """A listener that keeps the search tree; :meth:`tree` is its state now."""

    components: list[RankedComponent] = field(default_factory=list)
    sources: list[SourceKind] = field(default_factory=list)
    lessons: list[RecalledLesson] = field(default_factory=list)
    rounds: list[list[_Node]] = field(default_factory=list)
    triaged: bool = False
    events: int = 0
    _nodes: dict[str, _Node] = field(default_factory=dict)
    _beams: int = 0  # beams of the current round so far
    _pending_beam: set[str] = field(default_factory=set)

    def __call__(self, event: Event) -> None:
        self.events += 1
        if isinstance(event, Triaged):
            self.components, self.sources, self.triaged = list(event.components), list(event.sources), True
        elif isinstance(event, Recalled):
            self.lessons = list(event.lessons)
        elif isinstance(event, Proposed):
            self.rounds.append([self._node(h) for h in event.hypotheses])
            self._beams = 0
        elif isinstance(event, Beam):
            self._beams += 1
            self._pending_beam = set(event.hypothesis_ids)
        elif isinstance(event, Started):
            node = self._node(event.hypothesis)
            if not self.rounds or all(node is not n for n in self.rounds[-1]):
                self.rounds.append([node])  # verified without a proposal the recorder heard of
                self._beams = 0
            if event.hypothesis.id not in self._pending_beam:  # no beam announced: a beam of its own
                self._beams += 1
            node.beam = self._beams
        elif isinstance(event, StepTaken):
            action = event.step.action
            self._nodes[event.hypothesis_id].steps.append(action.key() if action is not None else "(no call)")
        elif isinstance(event, Concluded):
            node = self._nodes[event.hypothesis_id]
            node.status, node.stop_reason, node.reason = event.verdict.status, event.stop_reason, event.verdict.reason

    def _node(self, hypothesis: Hypothesis) -> _Node:
        node = self._nodes.get(hypothesis.id)
        if node is None:
            node = self._nodes[hypothesis.id] = _Node(hypothesis)
        return node

    def running(self) -> list[SearchNode]:
        """Hypotheses in a beam that have no verdict yet."""
        return [n.frozen() for r in self.rounds for n in r if n.beam is not None and n.status is None]

    def tree(self) -> SearchTree:
        return SearchTree(
            components=self.components,
            sources=self.sources,
            lessons=self.lessons,
            rounds=[SearchRound(index=i, nodes=[n.frozen() for n in r]) for i, r in enumerate(self.rounds, 1)],
        )


def fan_out(listeners: Iterable[Listener | None]) -> Listener:
    """One listener that tells each of several, in order."""
    chosen = [listener for listener in listeners if listener is not None]

    def tell(event: Event) -> None:
        for listener in chosen:
            listener(event)

    return tell


def replayed(events: Iterable[Event], into: Callable[[Event], None] | None = None) -> SearchTree:
    """The tree a list of recorded events builds (each also told to ``into``, a live view say)."""
    recorder = SearchRecorder()
    tell = fan_out([recorder, into])
    for event in events:
        tell(event)
    return recorder.tree()
