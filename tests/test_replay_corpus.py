"""Every recorded incident replays to its expected verdict, with refutations that cite real data."""

import asyncio
from pathlib import Path

import pytest

from opsagent.fixtures import load
from opsagent.pipeline import investigate_fixture
from opsagent.plan import load_default_playbooks
from opsagent.scoreboard import fixture_dirs, score
from tests.conftest import INCIDENTS

PLAYBOOKS = load_default_playbooks()
CORPUS = fixture_dirs(INCIDENTS)


@pytest.mark.parametrize("directory", CORPUS, ids=[d.name for d in CORPUS])
def test_hybrid_reaches_the_expected_verdict(directory: Path) -> None:
    report, truth = asyncio.run(investigate_fixture(directory, playbooks=PLAYBOOKS))
    assert truth is not None
    result = score(directory.name, report, truth)
    if result.expected == "inconclusive":
        assert report.status == "inconclusive"
        assert report.root_cause is None and report.statement.startswith("inconclusive — needs a human")
    else:
        assert report.status in ("confirmed", "probable"), report.statement
        assert report.root_cause is not None
        assert (report.root_cause.component, report.root_cause.kind) == (truth.service, truth.kind)
        cited = {e.observation_id for e in report.evidence}
        assert cited <= {o.id for o in report.observations}
    observations = {o.id: o for o in report.observations}
    for refuted in report.refuted:
        assert refuted.verdict.refuting, refuted.hypothesis.id
        for evidence in refuted.verdict.refuting:
            assert observations[evidence.observation_id].source == evidence.source
    assert report.suspects, "a report always ranks suspects"


def test_corpus_meets_the_published_bar() -> None:
    """The shape the issue asks for: enough incidents, kinds, big topologies, red herrings."""
    assert len(CORPUS) >= 12
    loaded = [load(d) for d in CORPUS]
    kinds = {t.kind for _, t in loaded if t is not None}
    assert len(kinds - {"unknown"}) >= 8
    assert sum(1 for _, t in loaded if t is not None and t.expect == "inconclusive") >= 2
    elsewhere = sum(1 for r, t in loaded if t is not None and t.service not in r.alert.labels.values())
    assert elsewhere >= len(CORPUS) / 2
