"""A Kubernetes cluster's configuration: credentials, namespaces, the labels that name a service.

Models only: no client is imported here, so loading settings stays cheap; secrets come from the
environment (:mod:`adapters.baseconfig`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from adapters.baseconfig import Kind, SourceConfig


class KubernetesConfig(SourceConfig):
    """A cluster, read-only. Credentials: a kubeconfig (its current context, or ``context``), or the
    pod's service account when opsagent runs in the cluster; ``auto`` tries the kubeconfig first."""

    kind: Kind = "kubernetes"
    auth: Literal["auto", "kubeconfig", "in_cluster"] = "auto"
    kubeconfig: Path | None = Field(default=None, description="default: $KUBECONFIG, else ~/.kube/config")
    context: str | None = None
    serviceaccount: Path = Field(
        default=Path("/var/run/secrets/kubernetes.io/serviceaccount"), description="the mounted service-account token"
    )
    namespaces: list[str] = Field(
        default_factory=list, description="namespaces to read; empty: all (needs a ClusterRole, see docs/sources.md)"
    )
    service_labels: list[str] = Field(
        default_factory=lambda: ["app.kubernetes.io/name", "app", "k8s-app", "service", "app.kubernetes.io/instance"],
        min_length=1,
        description="pod labels naming the service, tried in order (then the owning workload's name)",
    )
    argo_rollouts: bool = Field(default=True, description="read Argo Rollouts' history too (where the CRD exists)")
