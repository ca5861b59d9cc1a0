"""The deployment files, checked offline: the Kubernetes manifests validate against the API's own
schemas (kubernetes-validate ships them) and say what a team relies on (two web replicas that take
no investigations, a worker Deployment, probes, requests, secrets only by reference, a non-root
user); the ConfigMap's opsagent.yaml is a valid configuration; the Dockerfile runs the installed
package as a non-root user with a health check on /readyz. No Docker engine runs here: the image
itself is not built (the wheel it installs is, in test_packaging)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from opsagent.cli import app
from opsagent.settings import Settings, load_settings, secret_fields
from tests.conftest import ROOT

DEPLOY = ROOT / "deploy" / "kubernetes"
MANIFESTS = sorted(p for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")


def documents() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def by_kind(kind: str, name: str) -> dict[str, Any]:
    return next(d for d in documents() if d["kind"] == kind and d["metadata"]["name"] == name)


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_manifest_validates_against_the_kubernetes_schemas(path: Path) -> None:
    version = kubernetes_validate.latest_version()
    for doc in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(doc, version, strict=True)  # raises on an unknown or mistyped field


def test_the_kustomization_lists_every_manifest() -> None:
    listed = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == [p.name for p in MANIFESTS]


def test_two_web_replicas_take_webhooks_and_workers_run_the_investigations() -> None:
    web, worker = by_kind("Deployment", "opsagent-web"), by_kind("Deployment", "opsagent-worker")
    assert web["spec"]["replicas"] == 2 and container(web)["args"] == ["serve", "--no-workers"]
    assert container(worker)["args"] == ["worker"] and worker["spec"]["replicas"] >= 1
    service = by_kind("Service", "opsagent")
    assert service["spec"]["selector"] == web["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["ports"][0]["targetPort"] == container(web)["ports"][0]["name"]
    runner = CliRunner()
    assert "--no-workers" in runner.invoke(app, ["serve", "--help"]).output
    assert runner.invoke(app, ["worker", "--help"]).exit_code == 0


@pytest.mark.parametrize("name", ["opsagent-web", "opsagent-worker"])
def test_pods_have_probes_requests_a_non_root_user_and_secrets_only_by_reference(name: str) -> None:
    deployment = by_kind("Deployment", name)
    pod = deployment["spec"]["template"]["spec"]
    main = container(deployment)
    assert main["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert main["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert {"cpu", "memory"} <= set(main["resources"]["requests"])
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert main["securityContext"]["allowPrivilegeEscalation"] is False
    secrets = {f"OPSAGENT_{f.upper()}" for f in secret_fields(Settings)}
    env = {e["name"]: e for e in main["env"]}
    assert "OPSAGENT_STORE_PASSWORD" in env
    for variable in set(env) & secrets:  # a secret is never written into a manifest
        assert "value" not in env[variable] and "secretKeyRef" in env[variable]["valueFrom"], variable
    config = env["OPSAGENT_CONFIG"]["value"]
    mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
    assert str(Path(config).parent) in mounts


def test_the_configmaps_configuration_is_valid_and_holds_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = by_kind("ConfigMap", "opsagent")["data"]["opsagent.yaml"]
    config = tmp_path / "opsagent.yaml"
    config.write_text(text)
    monkeypatch.setenv("OPSAGENT_CONFIG", str(config))
    settings = load_settings()
    assert settings.store.kind == "postgresql" and settings.store.password is None  # the password: env only
    assert not set(yaml.safe_load(text)) & secret_fields(Settings)


def dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    joined, out = "", []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        joined += line.rstrip("\\").strip() + " "
        if not line.rstrip().endswith("\\"):
            keyword, _, rest = joined.strip().partition(" ")
            out.append((keyword.upper(), rest))
            joined = ""
    return out


def test_the_image_runs_the_installed_package_as_a_non_root_user_with_a_readiness_check() -> None:
    steps = dockerfile()
    final = steps[max(i for i, (k, _) in enumerate(steps) if k == "FROM") :]  # the runtime stage
    users = [rest for k, rest in final if k == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    health = [rest for k, rest in final if k == "HEALTHCHECK"]
    assert health and "/readyz" in health[0]
    installs = [rest for k, rest in final if k == "RUN" and "pip install" in rest]
    assert installs and ".whl)[postgresql]" in installs[0]  # the wheel: playbooks and data files inside it
    assert ("ENTRYPOINT", '["opsagent"]') in final
    user = int(users[-1].split(":")[0])
    web = by_kind("Deployment", "opsagent-web")["spec"]["template"]["spec"]["securityContext"]
    assert web["runAsUser"] == user  # the manifests run the image's own user
