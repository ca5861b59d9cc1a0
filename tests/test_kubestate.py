"""The Kubernetes signs of opsagent/kubestate.py that the playbooks' expectations and triage's ``kube:``
features call, over the small clusters of tests/data/kube/clusters.yaml."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from opsagent.fixtures import KubeObject
from opsagent.kubestate import BAD_EXIT, Cluster, ended, pods_view, since_onset

CLUSTERS: dict[str, list[dict[str, Any]]] = yaml.safe_load(
    (Path(__file__).parent / "data" / "kube" / "clusters.yaml").read_text()
)
ONSET = datetime(2026, 5, 4, 10, 10, tzinfo=UTC)
READ_AT = datetime(2026, 5, 4, 10, 15, tzinfo=UTC)


def test_a_container_that_failed_only_while_starting_and_served_through_onset_has_not_ended() -> None:
    """Kubernetes starts a pod's containers in no order: a service that exits because its sidecar is
    not up yet, then runs, ready, from before onset, did not fail in this incident. A container that
    ran for an hour before it exited did, though it runs again."""
    cluster = Cluster(KubeObject.model_validate(o) for o in CLUSTERS["startup_exit"])
    data = pods_view(cluster, service=None, since=since_onset(ONSET), read_at=READ_AT)
    since = since_onset(ONSET)
    assert ended(data, "web", BAD_EXIT, since, onset=ONSET) == []
    assert len(ended(data, "web", BAD_EXIT, since)) == 1  # without the onset, every end since counts
    (cart,) = ended(data, "cart", BAD_EXIT, since, onset=ONSET)
    assert cart.startswith("cart-5c8d7f9b6c-q1w2e/cart Error at 10:05")


def test_a_startup_failure_after_onset_still_counts() -> None:
    """The same quick exit, with the incident starting before the container came up: it is the incident's."""
    cluster = Cluster(KubeObject.model_validate(o) for o in CLUSTERS["startup_exit"])
    early = datetime(2026, 5, 4, 10, 1, tzinfo=UTC)
    data = pods_view(cluster, service=None, since=since_onset(early), read_at=READ_AT)
    assert len(ended(data, "web", BAD_EXIT, since_onset(early), onset=early)) == 1
