"""The playbooks' Kubernetes expectations: one rule each, deciding on the cluster's own words."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from opsagent.incident import open_incident
from opsagent.models import (
    Action,
    Alert,
    ContainerState,
    KubeEvent,
    KubernetesData,
    NodeState,
    Observation,
    PodState,
    SourceKind,
)
from opsagent.playbooks import Context, Expectation, evaluate

ONSET = datetime(2026, 4, 9, 9, 40, tzinfo=UTC)
INCIDENT = open_incident(Alert.model_validate({"labels": {"alertname": "X", "service": "cart"}, "startsAt": ONSET}))
CTX = Context(incident=INCIDENT, service="cart")


def _obs(data: KubernetesData) -> Observation:
    return Observation(
        id="k-1", action=Action(tool="kubernetes.pods"), source=SourceKind.kubernetes, data=data, text="", tokens=1
    )


def _pod(*containers: ContainerState, ready: bool = True, phase: str = "Running", why: str | None = None) -> PodState:
    return PodState(
        name="cart-1",
        namespace="prod",
        service="cart",
        node="node-a",
        phase=phase,
        ready=ready,
        unschedulable=why,
        containers=list(containers),
    )


RUNNING = ContainerState(name="cart", state="running", ready=True)
OOM = ContainerState(
    name="cart",
    state="running",
    ready=True,
    restarts=4,
    last_reason="OOMKilled",
    last_exit_code=137,
    last_finished_at=ONSET + timedelta(minutes=3),
    memory_limit="256Mi",
)
OLD_OOM = OOM.model_copy(update={"last_finished_at": ONSET - timedelta(hours=5)})


@pytest.mark.parametrize(
    "op, pods, events, nodes, met",
    [
        ({"op": "terminated", "reasons": ["OOMKilled"]}, [_pod(OOM)], [], [], True),
        ({"op": "terminated", "reasons": ["OOMKilled"]}, [_pod(OLD_OOM)], [], [], False),  # long before onset
        ({"op": "pods_steady"}, [_pod(OLD_OOM)], [], [], True),
        ({"op": "pods_steady"}, [_pod(OOM)], [], [], False),
        (
            {"op": "waiting", "reasons": ["CrashLoopBackOff"]},
            [_pod(ContainerState(name="cart", state="waiting", reason="CrashLoopBackOff"), ready=False)],
            [],
            [],
            True,
        ),
        ({"op": "waiting", "reasons": ["ErrImagePull"]}, [_pod(RUNNING)], [], [], False),
        ({"op": "pending"}, [_pod(phase="Pending", ready=False, why="0/3 nodes: Insufficient cpu")], [], [], True),
        (
            {"op": "not_ready"},
            [_pod(ContainerState(name="cart", state="running", ready=False), ready=False)],
            [],
            [],
            True,
        ),
        (
            {"op": "kube_event", "reasons": ["Unhealthy"], "pattern": "readiness probe failed"},
            [_pod(RUNNING)],
            [
                KubeEvent(
                    type="Warning",
                    reason="Unhealthy",
                    object="Pod/cart-1",
                    service="cart",
                    message="Readiness probe failed: HTTP 503",
                    count=9,
                    last_seen=ONSET + timedelta(minutes=1),
                )
            ],
            [],
            True,
        ),
        (
            {"op": "kube_event", "reasons": ["Unhealthy"]},
            [_pod(RUNNING)],
            [
                KubeEvent(
                    type="Warning",
                    reason="Unhealthy",
                    object="Pod/cart-1",
                    service="cart",
                    message="x",
                    last_seen=ONSET - timedelta(hours=2),
                )
            ],
            [],
            False,
        ),
        (
            {"op": "node_pressure"},
            [_pod(RUNNING)],
            [],
            [NodeState(name="node-a", ready=True, problems=["DiskPressure"])],
            True,
        ),
        ({"op": "node_pressure"}, [_pod(RUNNING)], [], [NodeState(name="node-a", ready=True)], False),
    ],
)
def test_each_kubernetes_expectation(
    op: dict[str, object], pods: list[PodState], events: list[KubeEvent], nodes: list[NodeState], met: bool
) -> None:
    data = KubernetesData(service="cart", pods=pods, events=events, nodes=nodes)
    outcome = evaluate(Expectation.model_validate(op), _obs(data), CTX)
    assert outcome.met is met, outcome.value


def test_no_pods_of_the_service_cannot_decide() -> None:
    data = KubernetesData(service="cart", pods=[])
    for op in ("terminated", "waiting", "pending", "not_ready", "pods_steady"):
        assert evaluate(Expectation(op=op), _obs(data), CTX).met is None  # type: ignore[arg-type]
