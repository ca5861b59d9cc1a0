"""A Kubernetes API server's read side, served through respx, in the API's real shapes.

Shapes, from the Kubernetes API reference and API concepts:
* list: ``{"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion", "continue"?}, "items": [...]}``,
  items without their own ``kind``/``apiVersion``
  (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#list-list-or-watch-objects-of-kind-pod);
* chunked lists: ``limit`` and ``continue`` (https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks);
* errors: a ``Status`` object ``{"kind": "Status", "status": "Failure", "message", "reason", "code"}``
  (https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/status/);
* ``GET /version``: ``{"major", "minor", "gitVersion", …}``.
Paths: ``/api/v1[/namespaces/NS]/pods|events|services|endpoints``, ``/api/v1/nodes``, ``/apis/apps/v1[/namespaces/NS]/deployments|
replicasets``, ``/apis/argoproj.io/v1alpha1[/namespaces/NS]/rollouts``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import httpx
import respx

from opsagent.fixtures import KubeObject

PLURAL = {
    "pods": ("Pod", "v1"),
    "events": ("Event", "v1"),
    "nodes": ("Node", "v1"),
    "deployments": ("Deployment", "apps/v1"),
    "replicasets": ("ReplicaSet", "apps/v1"),
    "statefulsets": ("StatefulSet", "apps/v1"),
    "daemonsets": ("DaemonSet", "apps/v1"),
    "rollouts": ("Rollout", "argoproj.io/v1alpha1"),
    "services": ("Service", "v1"),
    "endpoints": ("Endpoints", "v1"),
}
_LIST = re.compile(
    r"^/(?:api/v1|apis/apps/v1|apis/argoproj\.io/v1alpha1)(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)"
    r"(?:/(?P<name>[^/]+))?$"
)


def status(code: int, reason: str, message: str) -> httpx.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return httpx.Response(code, json=body)


class FakeCluster:
    """Serves objects as the API server lists them; every request is kept in ``requests``."""

    def __init__(
        self, objects: Iterable[KubeObject], *, page: int = 50, forbid: Iterable[str] = (), no_rollouts: bool = False
    ) -> None:
        self.objects = list(objects)
        self.page = page
        self.forbid = set(forbid)
        self.no_rollouts = no_rollouts
        self.requests: list[httpx.Request] = []

    def install(self, router: respx.Router, base: str) -> None:
        router.route(host=httpx.URL(base).host).mock(side_effect=self.answer)

    def answer(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.method != "GET":
            return status(405, "MethodNotAllowed", f"{request.method} is not served by this fake")
        path = request.url.path.rstrip("/") or "/"  # the API server serves /version and /version/ alike
        if path == "/version":
            return httpx.Response(
                200, json={"major": "1", "minor": "31", "gitVersion": "v1.31.4", "platform": "linux/amd64"}
            )
        found = _LIST.match(path)
        if found is None or found["plural"] not in PLURAL:
            return status(404, "NotFound", f"the server could not find the requested resource ({path})")
        kind, api_version = PLURAL[found["plural"]]
        if kind == "Rollout" and self.no_rollouts:
            return status(404, "NotFound", "the server could not find the requested resource")
        if kind in self.forbid:
            return status(
                403,
                "Forbidden",
                f'{found["plural"]} is forbidden: User "system:serviceaccount:ops:opsagent" '
                f'cannot list resource "{found["plural"]}" in API group ""',
            )
        ns = found["ns"]
        if found["name"]:  # get one object
            one = [o.raw() for o in self.objects if o.kind == kind and o.name == found["name"] and o.namespace == ns]
            if not one:
                return status(404, "NotFound", f'{found["plural"]} "{found["name"]}" not found')
            return httpx.Response(200, json=one[0])
        items = [o.raw() for o in self.objects if o.kind == kind and (ns is None or o.namespace == ns)]
        for item in items:  # list items do not carry their own kind and apiVersion
            item.pop("kind", None)
            item.pop("apiVersion", None)
        start = int(request.url.params.get("continue") or 0)
        limit = int(request.url.params.get("limit") or self.page)
        limit = min(limit, self.page)
        chunk = items[start : start + limit]
        meta: dict[str, Any] = {"resourceVersion": "4711"}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
        body = {"kind": f"{kind}List", "apiVersion": api_version, "metadata": meta, "items": chunk}
        return httpx.Response(200, content=json.dumps(body), headers={"content-type": "application/json"})


class EndlessCluster(FakeCluster):
    """An API server (or a proxy in front of one) whose every list answer carries a ``continue`` token:
    the first page holds the objects, every later one none (a paging loop must stop by itself)."""

    def answer(self, request: httpx.Request) -> httpx.Response:
        response = super().answer(request)
        if response.status_code != 200 or request.url.path.rstrip("/") == "/version":
            return response
        body = json.loads(response.content)
        if "items" in body:
            start = int(request.url.params.get("continue") or 0)
            body["items"] = body["items"] if start == 0 else []
            body["metadata"]["continue"] = str(start + 1)
        return httpx.Response(200, json=body)
