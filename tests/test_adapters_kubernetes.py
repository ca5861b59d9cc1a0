"""The Kubernetes source: kr8s against the API's real shapes (tests/fake_kubernetes.py cites them),
kubeconfig and service-account auth, the read-only guard, and parity with the recorded incident."""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import kr8s
import kr8s._exceptions
import pytest
import respx
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kr8s.asyncio.objects import Pod

from adapters.boundary import mapped_by
from adapters.config import open_live_sources
from adapters.kubernetes.reader import ERRORS, MAX_EMPTY_PAGES, KubernetesReader, open_api, refuse_unless_read, scrub
from adapters.sourceconfig import SourcesConfig
from opsagent.errors import AnswerTooLarge, NotReadOnly, SourceAuthFailed
from opsagent.features import profiles_from
from opsagent.fixtures import KubeObject, LogRecord, load
from opsagent.incident import open_incident
from opsagent.kubestate import Cluster, pods_view, rollout_changes
from opsagent.models import Action, ErrorData, KubernetesData, Observation, SourceKind
from opsagent.sources.kubernetes import READ, KubernetesState, RolloutChanges, recorded_last_words, replay_kubernetes
from opsagent.tools import Toolbox
from tests.conftest import INCIDENTS
from tests.fake_kubernetes import EndlessCluster, FakeCluster

FIXTURE = INCIDENTS / "cart-memory-limit-oomkill"
SERVER = "https://k8s.test:6443"


@pytest.fixture(scope="module")
def recorded() -> Any:
    recording, truth = load(FIXTURE)
    return recording, truth


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": {"server": SERVER, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "reader", "user": {"token": "reader-token"}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "reader", "namespace": "prod"}}],
                "current-context": "test",
            }
        )
    )
    return path


def _reader(kubeconfig: Path, **kw: Any) -> KubernetesReader:
    return KubernetesReader(lambda: open_api(auth="kubeconfig", kubeconfig=kubeconfig), name="prod", **kw)


def _incident(recording: Any) -> Any:
    return open_incident(recording.alert, window=recording.window, baseline=recording.baseline, id=recording.slug)


def _signs(data: KubernetesData, incident: Any) -> set[tuple[str, str]]:
    """Triage's Kubernetes features of each component, from one observation."""
    obs = Observation(
        id="k-1", action=Action(tool="kubernetes.pods"), source=SourceKind.kubernetes, data=data, text="", tokens=1
    )
    return {(c, f) for c, p in profiles_from([obs], incident).items() for f in p.features if f.startswith("kube:")}


# ---------------------------------------------------------------- reading


def test_the_reader_lists_every_kind_page_by_page_with_the_kubeconfig_token(recorded: Any, kubeconfig: Path) -> None:
    recording, _ = recorded
    fake = FakeCluster(recording.kubernetes, page=7)

    async def go() -> dict[str, int]:
        with respx.mock(assert_all_called=False) as router:
            fake.install(router, SERVER)
            reader = _reader(kubeconfig)
            try:
                kinds = ("Pod", "Event", "Node", "ReplicaSet", "Deployment", "StatefulSet")
                return {k: len(await reader.objects(kind=k)) for k in kinds}
            finally:
                await reader.aclose()

    counts = asyncio.run(go())
    expected = {k: sum(1 for o in recording.kubernetes if o.kind == k) for k in counts}
    assert counts == expected and counts["Pod"] > 7  # more than one page of pods
    lists = [r for r in fake.requests if not r.url.path.startswith("/version")]
    assert {r.headers["authorization"] for r in fake.requests} == {"Bearer reader-token"}
    assert any("continue" in r.url.params for r in lists)
    assert all(r.method == "GET" for r in fake.requests)


def test_a_live_read_says_what_the_recorded_incident_says(recorded: Any, kubeconfig: Path) -> None:
    """The same objects, served by an API server or replayed from kubernetes.jsonl, give the same
    observation and the same rollout history."""
    recording, _ = recorded
    incident = _incident(recording)
    replayed, with_rollouts = replay_kubernetes(recording)
    assert replayed is not None
    fake = FakeCluster(recording.kubernetes, page=25)

    async def go() -> tuple[KubernetesData, KubernetesData, list[Any], list[Any]]:
        with respx.mock(assert_all_called=False) as router:
            fake.install(router, SERVER)
            reader = _reader(kubeconfig)
            live = KubernetesState(reader, now=lambda: recording.window.end)
            try:
                a = await live.pods(incident=incident, service="cart-service")
                b = await replayed.pods(incident=incident, service="cart-service")
                # the whole cluster's read, with what the object analyzers find, says the same too
                assert await live.pods(incident=incident, service=None) == await replayed.pods(
                    incident=incident, service=None
                )
                start, end = incident.window.start - dt.timedelta(hours=2), incident.window.end
                changes = await RolloutChanges(live).changes(start=start, end=end, service="cart-service")
            finally:
                await reader.aclose()
            recorded_changes = [c for c in with_rollouts.changes if c.id.startswith("k8s-")]
            return a, b, changes, recorded_changes

    live, replay, live_changes, replay_changes = asyncio.run(go())
    assert live == replay
    assert [c.model_dump() for c in live_changes] == [c.model_dump() for c in replay_changes]
    lists = [r for r in fake.requests if "continue" not in r.url.params and not r.url.path.startswith("/version")]
    assert len(lists) == len(READ)  # one read of each kind per investigation, whatever is asked of it


def test_the_pods_observation_names_the_oom_kills_and_the_limit(recorded: Any) -> None:
    recording, _ = recorded
    incident = _incident(recording)
    state, _ = replay_kubernetes(recording)
    assert state is not None
    data = asyncio.run(state.pods(incident=incident, service="cart-service"))
    (cart,) = data.workloads
    assert cart.terminations.get("OOMKilled", 0) == cart.pods > 0
    assert all(c.memory_limit == "256Mi" for p in data.pods for c in p.containers)
    assert any(e.reason == "BackOff" and e.type == "Warning" for e in data.events)
    every = asyncio.run(state.pods(incident=incident, service=None))
    found = _signs(every, incident)
    assert ("cart-service", "kube:oom_killed") in found
    # An old readiness blip of search-service, long before onset, is not a sign of this incident.
    assert not any(s == "search-service" for s, _ in found)


def test_rollout_history_is_a_config_change_with_the_template_lines_and_the_pods_of_each_version(
    recorded: Any,
) -> None:
    recording, truth = recorded
    (change,) = [c for c in rollout_changes(Cluster(recording.kubernetes)) if c.service == "cart-service"]
    assert change.id == truth.change_ids[0]
    assert change.kind == "config"  # the image did not move, the pod template did
    assert (change.from_version, change.to_version) == ("revision 5", "revision 6")
    assert change.diff is not None
    assert "-containers(cart-service).resources.limits.memory: 512Mi" in change.diff.splitlines()
    assert "+containers(cart-service).resources.limits.memory: 256Mi" in change.diff.splitlines()
    assert len(change.pods["revision 6"]) == 3 and change.pods["revision 5"] == []
    # the new ReplicaSet's pods, by when they were created, are the rollout's steps
    assert sorted(p for s in change.steps for p in s.pods) == change.pods["revision 6"]
    assert change.steps[-1].weight == 100.0
    assert change.author == "platform-rightsizer"


def test_an_image_change_is_a_deploy_between_tags() -> None:
    def rs(name: str, rev: int, image: str, created: str) -> KubeObject:
        return KubeObject.model_validate(
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": name,
                    "namespace": "shop",
                    "creationTimestamp": created,
                    "labels": {"app.kubernetes.io/name": "adservice"},
                    "annotations": {"deployment.kubernetes.io/revision": str(rev)},
                    "ownerReferences": [{"kind": "Deployment", "name": "adservice"}],
                },
                "spec": {"template": {"spec": {"containers": [{"name": "server", "image": image}]}}},
            }
        )

    changes = rollout_changes(
        Cluster(
            [
                rs("adservice-7c9b8d6f5", 2, "gcr.io/shop/adservice:v1", "2026-03-01T10:00:00Z"),
                rs("adservice-59f7c4b8d", 3, "gcr.io/shop/adservice:v2", "2026-03-02T15:56:00Z"),
            ]
        )
    )
    (c,) = changes
    assert (c.kind, c.service, c.from_version, c.to_version) == ("deploy", "adservice", "v1", "v2")
    assert c.ts == dt.datetime(2026, 3, 2, 15, 56, tzinfo=dt.UTC)


# ---------------------------------------------------------------- auth


def _ca(path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def test_in_cluster_auth_reads_the_service_account_and_ignores_a_kubeconfig(
    recorded: Any, tmp_path: Path, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recording, _ = recorded
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text("sa-token")
    (sa / "namespace").write_text("prod")
    _ca(sa / "ca.crt")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))  # a developer's kubeconfig must not win in-cluster
    fake = FakeCluster(recording.kubernetes)

    async def go() -> int:
        with respx.mock(assert_all_called=False) as router:
            fake.install(router, "https://10.96.0.1:443")
            reader = KubernetesReader(
                lambda: open_api(auth="in_cluster", serviceaccount=sa), name="in-cluster", namespaces=["prod"]
            )
            try:
                return len(await reader.objects(kind="Pod"))
            finally:
                await reader.aclose()

    assert asyncio.run(go()) == sum(1 for o in recording.kubernetes if o.kind == "Pod")
    assert {r.headers["authorization"] for r in fake.requests} == {"Bearer sa-token"}
    assert {r.url.path.rstrip("/") for r in fake.requests} == {"/version", "/api/v1/namespaces/prod/pods"}


def test_no_credentials_is_an_auth_failure_that_names_the_source(tmp_path: Path) -> None:
    reader = KubernetesReader(lambda: open_api(auth="kubeconfig", kubeconfig=tmp_path / "missing"), name="nowhere")
    with pytest.raises(SourceAuthFailed) as raised:
        asyncio.run(reader.objects(kind="Pod"))
    assert raised.value.source == "kubernetes:nowhere"


# ---------------------------------------------------------------- read-only


WRITES = ("POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE", "CONNECT")


@pytest.mark.parametrize("method", WRITES)
def test_the_guard_refuses_every_verb_but_get(method: str) -> None:
    with pytest.raises(NotReadOnly):
        refuse_unless_read(httpx.Request(method, f"{SERVER}/api/v1/namespaces/prod/pods/cart-0"))


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/namespaces/prod/secrets",
        "/api/v1/namespaces/prod/secrets/db-password",
        "/api/v1/namespaces/prod/configmaps",
        "/api/v1/namespaces/prod/pods/cart-0/exec",
        "/api/v1/namespaces/prod/pods/cart-0/attach",
        "/api/v1/namespaces/prod/pods/cart-0/portforward",
        "/api/v1/namespaces/prod/pods/cart-0/proxy",
        "/api/v1/namespaces/prod/pods/cart-0/log",
        "/api/v1/namespaces/prod/services/cart:80/proxy/admin",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "/apis/apps/v1/namespaces/prod/deployments/cart/scale",
    ],
)
def test_the_guard_refuses_reads_of_what_opsagent_has_no_business_reading(path: str) -> None:
    with pytest.raises(NotReadOnly):
        refuse_unless_read(httpx.Request("GET", f"{SERVER}{path}"))


def test_the_guard_lets_through_the_reads_opsagent_makes() -> None:
    for path in (
        "/version",
        "/api/v1/pods?limit=100",
        "/api/v1/namespaces/prod/pods?limit=100&continue=abc",
        "/api/v1/namespaces/prod/events?fieldSelector=involvedObject.name%3Dcart-0",
        "/api/v1/nodes",
        "/apis/apps/v1/namespaces/prod/replicasets",
        "/apis/apps/v1/deployments?watch=true&resourceVersion=10",
        "/apis/argoproj.io/v1alpha1/namespaces/prod/rollouts",
    ):
        refuse_unless_read(httpx.Request("GET", f"{SERVER}{path}"))
    with pytest.raises(NotReadOnly):  # a dry run is still a write request
        refuse_unless_read(httpx.Request("GET", f"{SERVER}/api/v1/pods?dryRun=All"))
    with pytest.raises(NotReadOnly):  # no websocket, whatever path
        refuse_unless_read(httpx.Request("GET", f"{SERVER}/api/v1/pods", headers={"Upgrade": "websocket"}))


def test_no_write_can_leave_the_client_whatever_code_path_asks(recorded: Any, kubeconfig: Path) -> None:
    """Through kr8s's own API, every verb and every write method of its objects: refused before a
    byte is sent; the server sees GETs of readable resources only."""
    recording, _ = recorded
    fake = FakeCluster(recording.kubernetes)
    raw = next(o for o in recording.kubernetes if o.kind == "Pod").raw()

    async def go() -> list[str]:
        refused = []
        with respx.mock(assert_all_called=False) as router:
            fake.install(router, SERVER)
            api = await open_api(auth="kubeconfig", kubeconfig=kubeconfig)
            for method in WRITES:
                try:
                    async with api.call_api(method, url="pods/cart-0", namespace="prod"):
                        pass
                except NotReadOnly:
                    refused.append(method)
            pod = Pod(raw, api=api)
            for name, call in (
                ("create", lambda: pod.create()),
                ("delete", lambda: pod.delete()),
                ("patch", lambda: pod.patch({"metadata": {"labels": {"x": "y"}}})),
                ("label", lambda: pod.label({"x": "y"})),
                ("annotate", lambda: pod.annotate({"x": "y"})),
                ("exec", lambda: pod.exec(["sh", "-c", "id"])),
                ("logs", lambda: _drain(pod.logs())),
                ("remove_label", lambda: pod.remove_label("app")),
            ):
                try:
                    await call()
                except NotReadOnly:
                    refused.append(name)
                except Exception as exc:  # kr8s may wrap it; the refusal must be at the bottom
                    if isinstance(exc.__cause__ or exc.__context__, NotReadOnly):
                        refused.append(name)
                    else:
                        raise
            await api._session.aclose()  # type: ignore[union-attr]
        return refused

    refused = asyncio.run(go())
    assert refused == [*WRITES, "create", "delete", "patch", "label", "annotate", "exec", "logs", "remove_label"]
    assert fake.requests and all(r.method == "GET" for r in fake.requests)
    reached = {r.url.path.rstrip("/") for r in fake.requests}
    assert reached <= {"/version", f"/api/v1/namespaces/prod/pods/{raw['metadata']['name']}"}, reached


async def _drain(gen: Any) -> None:
    async for _ in gen:
        pass


def test_the_reader_offers_no_method_that_writes() -> None:
    public = {n for n, _ in inspect.getmembers(KubernetesReader) if not n.startswith("_")}
    assert public == {"api", "objects", "version", "aclose"}


# ---------------------------------------------------------------- errors and degraded reads


def test_every_kr8s_exception_is_mapped() -> None:
    foreign = [
        cls
        for _, cls in inspect.getmembers(kr8s._exceptions, inspect.isclass)
        if issubclass(cls, Exception) and cls.__module__ == kr8s._exceptions.__name__
    ]
    assert foreign
    assert all(mapped_by(cls, ERRORS) is not None for cls in foreign), foreign


def test_events_the_identity_may_not_list_are_named_and_pods_still_answer(recorded: Any, kubeconfig: Path) -> None:
    recording, _ = recorded
    incident = _incident(recording)
    fake = FakeCluster(recording.kubernetes, forbid={"Event"}, no_rollouts=True)

    async def go() -> KubernetesData:
        with respx.mock(assert_all_called=False) as router:
            fake.install(router, SERVER)
            reader = _reader(kubeconfig)
            try:
                return await KubernetesState(reader).pods(incident=incident, service="cart-service")
            finally:
                await reader.aclose()

    data = asyncio.run(go())
    assert data.pods and not data.events
    assert len(data.unread) == 1 and data.unread[0].startswith("Event: HTTP 403")
    assert "cannot list resource" in data.unread[0]


def test_a_cluster_that_refuses_pods_is_an_observation_naming_the_source(recorded: Any, kubeconfig: Path) -> None:
    recording, _ = recorded
    incident = _incident(recording)
    fake = FakeCluster(recording.kubernetes, forbid={"Pod"})

    async def go() -> Any:
        with respx.mock(assert_all_called=False) as router:
            fake.install(router, SERVER)
            config = SourcesConfig.model_validate(
                {"kubernetes": [{"name": "prod", "auth": "kubeconfig", "kubeconfig": str(kubeconfig)}]}
            )
            async with open_live_sources(config, environ={}) as live:
                toolbox = Toolbox(sources=live.sources, catalog=live.catalog, incident=incident)
                obs = await toolbox.call(Action(tool="kubernetes.pods", args={"service": "cart-service"}))
                changes = await toolbox.call(Action(tool="changes.list", args={"service": "cart-service"}))
                return obs, changes, toolbox

    obs, changes, toolbox = asyncio.run(go())
    assert isinstance(obs.data, ErrorData) and "kubernetes:prod could not be read" in obs.data.error
    assert isinstance(changes.data, ErrorData) and "changes:prod" in changes.data.error
    assert "kubernetes:prod" in toolbox.unreadable


def test_env_values_are_digested_and_server_bookkeeping_dropped() -> None:
    raw = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": "cart-0",
            "managedFields": [{"manager": "kubectl"}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": '{"spec": "DB_PASSWORD=hunter2"}'},
        },
        "spec": {"containers": [{"name": "cart", "env": [{"name": "DB_PASSWORD", "value": "hunter2"}]}]},
    }
    clean = scrub(raw)
    assert "hunter2" not in str(clean)
    assert clean["spec"]["containers"][0]["env"][0]["value"].startswith("sha256:")
    assert "managedFields" not in clean["metadata"]


# ---------------------------------------------------------------- the signs, one rule each


def _pod(name: str, app: str | None, status: dict[str, Any], *, owner: str | None = None) -> KubeObject:
    meta: dict[str, Any] = {"name": name, "namespace": "prod", "creationTimestamp": "2026-04-09T09:00:00Z"}
    if app:
        meta["labels"] = {"app": app}
    if owner:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": owner}]
    return KubeObject.model_validate(
        {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": "node-a"}, "status": status}
    )


def test_signs_of_image_pulls_scheduling_and_probes_and_the_new_events_api(recorded: Any) -> None:
    recording, _ = recorded
    incident = _incident(recording)
    at = "2026-04-09T09:45:00Z"
    objects = [
        _pod(
            "ads-59f7c4b8d-x1x2x",
            None,  # no labels: its ReplicaSet's name gives the service
            {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "server",
                        "ready": False,
                        "restartCount": 0,
                        "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}},
                    }
                ],
            },
            owner="ads-59f7c4b8d",
        ),
        _pod(
            "search-0",
            "search",
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/4 nodes are available: 4 Insufficient memory.",
                    }
                ],
            },
        ),
        KubeObject.model_validate(
            {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": "web-1.17f", "namespace": "prod"},
                "regarding": {"kind": "Pod", "name": "web-1", "namespace": "prod"},
                "reason": "Unhealthy",
                "note": "Readiness probe failed: HTTP probe failed with statuscode: 503",
                "type": "Warning",
                "eventTime": at,
                "series": {"count": 12, "lastObservedTime": at},
            }
        ),
        _pod("web-1", "web", {"phase": "Running"}),
    ]
    cluster = Cluster(objects)
    data = pods_view(cluster, service=None, since=incident.onset - dt.timedelta(minutes=30), read_at=incident.onset)
    found = _signs(data, incident)
    assert found == {("ads", "kube:image_pull"), ("search", "kube:unschedulable"), ("web", "kube:probe_failed")}
    (probe,) = data.events
    assert probe.count == 12 and probe.service == "web"


def test_doctor_reads_the_clusters_version_and_sees_its_pods(recorded: Any, kubeconfig: Path) -> None:
    from adapters.kubernetes.config import KubernetesConfig
    from opsagent.doctor import check

    recording, _ = recorded
    with respx.mock(assert_all_called=False) as router:
        FakeCluster(recording.kubernetes).install(router, SERVER)
        config = KubernetesConfig(name="prod", auth="kubeconfig", kubeconfig=kubeconfig, namespaces=["prod"])
        health = asyncio.run(check(config, environ={}))
        empty = asyncio.run(check(config.model_copy(update={"namespaces": ["nothing-here"]}), environ={}))
    assert health.ok and health.version == "v1.31.4"
    assert empty.reachable and "no pods visible in nothing-here" in empty.problems[0]


def test_doctor_names_the_kinds_the_credentials_may_list_and_those_it_may_not(recorded: Any, kubeconfig: Path) -> None:
    from adapters.kubernetes.config import KubernetesConfig
    from opsagent.doctor import check

    recording, _ = recorded
    with respx.mock(assert_all_called=False) as router:
        FakeCluster(recording.kubernetes, forbid={"Event", "Node"}).install(router, SERVER)
        config = KubernetesConfig(name="prod", auth="kubeconfig", kubeconfig=kubeconfig, namespaces=["prod"])
        health = asyncio.run(check(config, environ={}))
    assert health.reachable and not health.ok
    assert health.readable == ["Pod", "ReplicaSet", "Deployment", "StatefulSet", "Rollout", "Service", "Endpoints"]
    refused = [p for p in health.problems if p.startswith("cannot list")]
    assert [p.split(":")[0] for p in refused] == ["cannot list Event", "cannot list Node"]
    assert all("403" in p for p in refused)
    assert any("grant get, list and watch on Event" in f for f in health.fixes)


def test_what_a_live_investigation_read_of_the_cluster_is_recorded_as_it_came(recorded: Any, kubeconfig: Path) -> None:
    from adapters.wrappers import Recorder
    from adapters.wrappers import recorded as recording_of

    recording, _ = recorded
    keep = Recorder()

    async def go() -> None:
        with respx.mock(assert_all_called=False) as router:
            FakeCluster(recording.kubernetes).install(router, SERVER)
            reader = _reader(kubeconfig)
            try:
                await recording_of(reader, keep).objects(kind="Pod")
            finally:
                await reader.aclose()

    asyncio.run(go())
    pods = [o for o in recording.kubernetes if o.kind == "Pod"]
    assert sorted(keep.kubernetes) == sorted(("Pod", o.namespace, o.name) for o in pods)
    assert {k: o.raw() for k, o in keep.kubernetes.items()} == {("Pod", o.namespace, o.name): o.raw() for o in pods}


# ---------------------------------------------------------------- bounded reads, shared read


def test_a_list_that_never_ends_stops_at_the_page_cap_and_is_named_as_read_in_part(
    recorded: Any, kubeconfig: Path
) -> None:
    recording, _ = recorded
    incident = _incident(recording)
    fake = EndlessCluster(recording.kubernetes, page=1000, no_rollouts=True)

    async def go() -> KubernetesData:
        with respx.mock(assert_all_called=False) as router:
            fake.install(router, SERVER)
            reader = _reader(kubeconfig, max_pages=5)
            try:
                return await KubernetesState(reader).pods(incident=incident, service=None)
            finally:
                await reader.aclose()

    data = asyncio.run(go())
    lists = [r for r in fake.requests if "/version" not in r.url.path]
    # eight kinds (pods, events, nodes, Deployments, ReplicaSets, StatefulSets, Services, Endpoints;
    # rollouts are not installed), five pages each, and not one request more
    assert len(lists) == 8 * 5 + 1, len(lists)
    assert data.pods  # what the first pages held is still used
    pods_unread = [u for u in data.unread if u.startswith("Pod:")]
    assert pods_unread and "stopped at 5 pages" in pods_unread[0] and "had not ended" in pods_unread[0]


def test_a_list_of_empty_pages_that_never_ends_is_stopped_after_ten_and_what_it_held_is_used(
    recorded: Any, kubeconfig: Path
) -> None:
    recording, _ = recorded
    incident = _incident(recording)
    fake = EndlessCluster(recording.kubernetes, page=1000, no_rollouts=True)

    async def go(cluster: FakeCluster) -> KubernetesData:
        with respx.mock(assert_all_called=False) as router:
            cluster.install(router, SERVER)
            reader = _reader(kubeconfig)  # the default caps: 200 pages, 32 MiB
            try:
                return await KubernetesState(reader).pods(incident=incident, service=None)
            finally:
                await reader.aclose()

    data = asyncio.run(go(fake))
    whole = asyncio.run(go(FakeCluster(recording.kubernetes, page=1000, no_rollouts=True)))
    asked: dict[str, int] = {}
    for r in fake.requests:
        if "/version" not in r.url.path and "rollouts" not in r.url.path:
            asked[r.url.path] = asked.get(r.url.path, 0) + 1
    # eight kinds, each its first page and then ten empty ones that still said "continue" (a kind
    # the cluster has none of: ten empty pages in all)
    assert len(asked) == 8 and set(asked.values()) <= {MAX_EMPTY_PAGES, 1 + MAX_EMPTY_PAGES}, asked
    assert asked["/api/v1/pods"] == 1 + MAX_EMPTY_PAGES
    assert data.pods and data.pods == whole.pods  # the first page held every pod: all of it used
    (pods_unread,) = [u for u in data.unread if u.startswith("Pod:")]
    assert "stopped at 10 empty pages in a row (the list had not ended)" in pods_unread


def test_a_continue_token_sent_back_twice_stops_the_list_instead_of_reading_it_again(
    recorded: Any, kubeconfig: Path
) -> None:
    recording, _ = recorded
    fake = FakeCluster(recording.kubernetes, page=2)
    pods = [o for o in recording.kubernetes if o.kind == "Pod"]

    def looping(request: httpx.Request) -> httpx.Response:
        response = fake.answer(request)
        body = json.loads(response.content)
        if response.status_code == 200 and "items" in body:
            body["metadata"]["continue"] = "2"  # a proxy that hands out one token forever
        return httpx.Response(response.status_code, json=body)

    async def go() -> AnswerTooLarge:
        with respx.mock(assert_all_called=False) as router:
            router.route(host=httpx.URL(SERVER).host).mock(side_effect=looping)
            reader = _reader(kubeconfig)
            try:
                with pytest.raises(AnswerTooLarge) as raised:
                    await reader.objects(kind="Pod")
                return raised.value
            finally:
                await reader.aclose()

    error = asyncio.run(go())
    assert "stopped at a continue token sent twice" in str(error)
    assert len(error.partial) == min(4, len(pods))  # two pages of two: the second asked for once only
    assert sum("continue" in r.url.params for r in fake.requests) == 1


def test_an_answer_past_the_byte_cap_is_stopped_while_it_streams_in(recorded: Any, kubeconfig: Path) -> None:
    recording, _ = recorded
    sent = {"bytes": 0}

    def huge() -> Iterator[bytes]:  # 200 MB if read to the end; never held whole by this side either
        yield b'{"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": ['
        chunk = b'{"metadata": {"name": "' + b"x" * (1 << 20) + b'"}},'
        for _ in range(200):
            sent["bytes"] += len(chunk)
            yield chunk

    fake = FakeCluster(recording.kubernetes)

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/pods"):
            return httpx.Response(200, stream=_Iter(huge()))
        return fake.answer(request)

    async def go() -> BaseException:
        with respx.mock(assert_all_called=False) as router:
            router.route(host=httpx.URL(SERVER).host).mock(side_effect=answer)
            reader = _reader(kubeconfig)
            try:
                with pytest.raises(AnswerTooLarge) as raised:
                    await reader.objects(kind="Pod")
                return raised.value
            finally:
                await reader.aclose()

    error = asyncio.run(go())
    assert "reading stopped" in str(error) and error.source == "kubernetes:prod"  # type: ignore[attr-defined]
    assert sent["bytes"] <= 40 * (1 << 20)  # the cap (32 MiB) and a chunk or so: not the 200 MB offered


class _Iter(httpx.AsyncByteStream):
    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


def test_one_callers_timeout_does_not_cancel_the_shared_read_for_the_others(recorded: Any) -> None:
    recording, _ = recorded
    incident = _incident(recording)

    class SlowReader:
        name = "kubernetes:slow"

        def __init__(self) -> None:
            self.release = asyncio.Event()
            self.reads = 0

        async def objects(self, *, kind: Any) -> list[KubeObject]:
            self.reads += 1
            await self.release.wait()
            return [o for o in recording.kubernetes if o.kind == kind]

    async def go() -> tuple[KubernetesData, list[Any], int]:
        reader = SlowReader()
        state = KubernetesState(reader)
        changes = RolloutChanges(state)
        patient = asyncio.ensure_future(state.pods(incident=incident, service=None))
        await asyncio.sleep(0)  # the pods call is waiting on the read
        # the rollout-changes call gives up first (the read cannot end before it is released)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(
                changes.changes(start=incident.window.start, end=incident.window.end, service=None), 0.01
            )
        reader.release.set()
        data = await patient  # the pods call still gets its answer, from the same read
        later = await changes.changes(start=incident.baseline.start, end=incident.window.end, service=None)
        return data, later, reader.reads

    data, later, reads = asyncio.run(go())
    assert data.pods and reads == len(READ)  # one read of each kind, shared by all three calls
    assert isinstance(later, list)


def test_a_recordings_last_words_are_the_containers_own_not_its_sidecars(recorded: Any) -> None:
    """What a crash-looping container said before it exited, from a recording's logs: the service's
    last lines in time order, a sidecar's lines left out, lines stamped after the window kept (a
    crashed container's lines may be stamped when they were collected)."""
    recording, _ = recorded
    end = recording.window.end

    def line(minutes: float, message: str, **extra: str) -> LogRecord:
        ts = end + dt.timedelta(minutes=minutes)
        return LogRecord.model_validate(
            {"ts": ts, "service": "cart-service", "level": "ERROR", "message": message, **extra}
        )

    logs = [
        line(0.5, "UnknownHostException: cart-db"),
        line(-2, "starting"),
        line(-1, "upstream connect error: connection refused", container="istio-proxy"),
        line(-1, "Access denied for user 'cart'", container="cart"),
    ]
    words = recorded_last_words(recording.model_copy(update={"logs": logs}))
    said = asyncio.run(words("cart-service", frozenset({"cart"}), end))
    assert said == ["starting", "Access denied for user 'cart'", "UnknownHostException: cart-db"]
    assert asyncio.run(words("nobody", frozenset(), end)) == []


def test_a_live_read_names_a_service_that_routes_to_no_pod(recorded: Any, kubeconfig: Path) -> None:
    """Services and Endpoints are read from the API server beside the pods (a recording may lack
    them): a Service whose selector matches no pod is the broken object, with the field that shows
    it, though every pod is running and ready."""
    recording, _ = recorded
    clusters = yaml.safe_load((Path(__file__).parent / "data" / "kube" / "clusters.yaml").read_text())
    fake = FakeCluster([KubeObject.model_validate(o) for o in clusters["service_selector"]])

    async def go() -> KubernetesData:
        with respx.mock(assert_all_called=False) as router:
            fake.install(router, SERVER)
            reader = _reader(kubeconfig)
            try:
                return await KubernetesState(reader).pods(incident=_incident(recording), service=None)
            finally:
                await reader.aclose()

    data = asyncio.run(go())
    assert [(f.object, f.sign, f.field) for f in data.findings] == [
        ("Service/shop/cart", "selector_matches_nothing", "spec.selector")
    ]
    paths = {r.url.path for r in fake.requests}
    assert "/api/v1/services" in paths and "/api/v1/endpoints" in paths
    assert all(r.method == "GET" for r in fake.requests) and not data.unread


class _Logs:
    """A logs source answering with fixed lines, keeping the queries it was asked."""

    name = "logs:test"

    def __init__(self, lines: list[LogRecord], *, fail: bool = False) -> None:
        self.lines, self.fail = lines, fail
        self.queries: list[Any] = []

    async def records(self, *, query: Any) -> Any:
        from opsagent.errors import SourceUnavailable
        from opsagent.sources.queries import LogBatch

        self.queries.append(query)
        if self.fail:
            raise SourceUnavailable("logs down", source=self.name)
        return LogBatch(records=self.lines, complete=True)


def test_a_live_crash_loop_is_named_by_its_containers_last_lines_from_the_logs_source(
    recorded: Any, kubeconfig: Path
) -> None:
    """Live, a crash-looping workload's last words come from the logs source (the cluster's log
    subresource stays outside the read-only guard): a name that does not resolve makes it a DNS
    fault; a logs source that fails leaves it a crash loop, and the cluster's read stands."""
    from opsagent.sources.kubernetes import live_last_words

    recording, _ = recorded
    clusters = yaml.safe_load((Path(__file__).parent / "data" / "kube" / "clusters.yaml").read_text())
    fake = FakeCluster([KubeObject.model_validate(o) for o in clusters["crash_loop"]])
    read_at = dt.datetime(2026, 5, 4, 10, 15, tzinfo=dt.UTC)
    said = [
        LogRecord.model_validate(
            {"ts": read_at - dt.timedelta(minutes=1), "service": "cart", "level": "ERROR", "message": m}
        )
        for m in ("starting", "java.net.UnknownHostException: cart-db: Name or service not known")
    ]

    def read(logs: _Logs) -> KubernetesData:
        async def go() -> KubernetesData:
            with respx.mock(assert_all_called=False) as router:
                fake.install(router, SERVER)
                reader = _reader(kubeconfig)
                state = KubernetesState(reader, now=lambda: read_at, last_words=live_last_words(logs))
                try:
                    return await state.pods(incident=_incident(recording), service=None)
                finally:
                    await reader.aclose()

        return asyncio.run(go())

    logs = _Logs(said)
    (f,) = read(logs).findings
    assert (f.component, f.sign, f.kind) == ("cart", "exits_on_dns", "dns_failure")
    (query,) = logs.queries
    assert query.service == "cart" and query.window.end == read_at
    (down,) = read(_Logs(said, fail=True)).findings
    assert (down.sign, down.kind) == ("unavailable", "crash_loop")
