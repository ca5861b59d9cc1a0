"""A Kubernetes incident replayed end to end: a right-sizing change lowers cart-service's memory
limit below its working set; the pods are OOM-killed and loop. The change is only in the cluster's
rollout history (the CI feed never saw it), so what the Kubernetes source adds decides the answer."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import yaml

from opsagent.models import ChangesData, KubernetesData
from opsagent.pipeline import investigate_fixture
from opsagent.plan import load_default_playbooks
from tests.conftest import INCIDENTS

FIXTURE = INCIDENTS / "cart-memory-limit-oomkill"
PLAYBOOKS = load_default_playbooks()


def test_the_memory_limit_change_from_the_rollout_history_is_the_confirmed_cause() -> None:
    report, truth = asyncio.run(investigate_fixture(FIXTURE, playbooks=PLAYBOOKS))
    assert truth is not None and report.root_cause is not None
    assert report.status == "confirmed"
    assert (report.root_cause.component, report.root_cause.kind) == ("cart-service", "config_change")
    observations = {o.id: o for o in report.observations}
    cited_changes = [
        c
        for e in report.evidence
        if isinstance(observations[e.observation_id].data, ChangesData)
        for c in observations[e.observation_id].data.changes  # type: ignore[union-attr]
        if c.service == "cart-service"
    ]
    assert [c.id for c in cited_changes] == truth.change_ids  # the Deployment's revision 6
    assert "limits.memory: 512Mi -> 256Mi" in cited_changes[0].summary
    assert any(t.kind == "change" and "k8s-prod-cart-service-rev6" in t.what for t in report.timeline)
    pods = [o for o in report.observations if o.action.tool == "kubernetes.pods"]
    assert pods and isinstance(pods[0].data, KubernetesData)
    assert "OOMKilled" in pods[0].text
    assert "kubernetes" not in " ".join(report.unreadable_sources)


def test_the_oom_kill_playbook_confirms_the_mechanism_from_the_cluster_and_the_metrics() -> None:
    only = [b for b in PLAYBOOKS if b.id == "oom-kill"]
    report, _ = asyncio.run(investigate_fixture(FIXTURE, playbooks=only))
    assert report.root_cause is not None and report.status == "confirmed"
    assert (report.root_cause.component, report.root_cause.kind) == ("cart-service", "oom_kill")
    sources = {e.source.value for e in report.evidence}
    assert {"kubernetes", "metrics"} <= sources
    statements = " ".join(e.statement for e in report.evidence)
    assert "OOMKilled" in statements and "exit 137" in statements


def test_without_the_cluster_the_same_telemetry_reads_as_a_leak(tmp_path: Path) -> None:
    """The control: drop kubernetes.jsonl and the change is invisible; the engine can only name the
    mechanism (and calls it a leak), never the change that set it off."""
    blind = tmp_path / "cart-memory-limit-oomkill"
    shutil.copytree(FIXTURE, blind)
    (blind / "kubernetes.jsonl").unlink()
    header = yaml.safe_load((blind / "incident.yaml").read_text(encoding="utf-8"))
    header["tags"]["sources"].remove("kubernetes")  # the header must not claim what is no longer there
    (blind / "incident.yaml").write_text(yaml.safe_dump(header, sort_keys=False), encoding="utf-8")
    report, truth = asyncio.run(investigate_fixture(blind, playbooks=PLAYBOOKS))
    assert truth is not None
    assert report.root_cause is None or report.root_cause.kind != "config_change"
    assert all(
        not any(c.id.startswith("k8s-") for c in o.data.changes)
        for o in report.observations
        if isinstance(o.data, ChangesData)
    )
