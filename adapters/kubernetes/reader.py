"""Kubernetes, read-only: pods, events, nodes, Services and Endpoints, Deployments, ReplicaSets and Argo Rollouts.

The client is kr8s (async, on httpx; lightkube 1.x moved to the httpx2 fork, which respx cannot
serve in tests). kr8s does what is hard to get right by hand: kubeconfig contexts, exec credential
plugins, client certificates, and the pod's service-account token. This module adds the guard that
makes the client read-only whatever code path asks it for something: every request passes
:func:`refuse_unless_read` before it leaves the process, which lets through only ``GET`` (get, list,
watch) of the resources listed in :data:`READABLE`, so no create, update, patch, delete, exec,
attach, port-forward, proxy, log or secret read can be sent (``tests/test_adapters_kubernetes.py``
proves it for every verb).

* :class:`KubernetesReader` lists objects of one kind (a :class:`opsagent.sources.readers.KubernetesReader`);
  :class:`opsagent.sources.kubernetes.RecordedObjects` serves a recorded incident's objects the same way.
* The Kubernetes source over either, and rollout history as changes, are :mod:`opsagent.sources.kubernetes`'s.

Env values in pod specs are replaced by a digest at the boundary (a change still shows, a secret
set as a plain env value never does), and ``managedFields`` and the last-applied annotation (a copy
of the whole spec) are dropped.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import kr8s
import kr8s.asyncio
import structlog
from kr8s.asyncio.objects import (
    APIObject,
    DaemonSet,
    Deployment,
    Endpoints,
    Event,
    Node,
    Pod,
    ReplicaSet,
    Service,
    StatefulSet,
    new_class,
)

from adapters.boundary import (
    HTTPX_ERRORS,
    MALFORMED,
    ErrorTable,
    error_text,
    status_error,
    translate,
)
from opsagent.errors import (
    AnswerTooLarge,
    MalformedResponse,
    NotReadOnly,
    SourceAuthFailed,
    SourceError,
    SourceTimeout,
    SourceUnavailable,
)
from opsagent.fixtures import KubeKind, KubeObject
from opsagent.sizecap import MAX_ANSWER_BYTES, size_cap

log = structlog.get_logger("opsagent.adapters")

Rollout = new_class("Rollout.argoproj.io/v1alpha1", namespaced=True, asyncio=True, plural="rollouts")

#: The kr8s class each kind is listed with.
CLASSES: dict[KubeKind, type[APIObject]] = {
    "Pod": Pod,
    "Event": Event,
    "Node": Node,
    "Deployment": Deployment,
    "ReplicaSet": ReplicaSet,
    "StatefulSet": StatefulSet,
    "DaemonSet": DaemonSet,
    "Rollout": Rollout,
    "Service": Service,
    "Endpoints": Endpoints,
}

_NS = r"(?:/namespaces/[a-z0-9][-a-z0-9.]*)?"
_NAME = r"(?:/[a-z0-9][-a-z0-9.]*)?"
#: Every path the client may GET: discovery and version, and the collections (or one object) of the
#: kinds above. No subresource (exec, attach, portforward, proxy, log, status…), no secrets.
READABLE = re.compile(
    r"^/(?:version|api|apis|apis/[a-z0-9.-]+(?:/v[0-9a-z]+)?"
    rf"|api/v1{_NS}/(?:pods|events|services|endpoints){_NAME}"
    rf"|api/v1/nodes{_NAME}"
    rf"|apis/apps/v1{_NS}/(?:deployments|replicasets|statefulsets|daemonsets){_NAME}"
    rf"|apis/events\.k8s\.io/v1{_NS}/events{_NAME}"
    rf"|apis/argoproj\.io/v1alpha1{_NS}/rollouts{_NAME})/?$"
)
_READ_PARAMS = frozenset(
    {
        "limit",
        "continue",
        "labelSelector",
        "fieldSelector",
        "watch",
        "resourceVersion",
        "resourceVersionMatch",
        "allowWatchBookmarks",
        "timeoutSeconds",
        "sendInitialEvents",
    }
)


def refuse_unless_read(request: httpx.Request) -> None:
    """Stop any request but a GET (get, list, watch) of a readable resource, before it is sent."""
    path = request.url.path
    if request.method != "GET":
        raise NotReadOnly(
            f"{request.method} {path} refused: opsagent only reads (get, list, watch)",
            source="kubernetes",
            query=f"{request.method} {path}",
        )
    if not READABLE.match(path):
        raise NotReadOnly(f"GET {path} refused: not a resource opsagent reads", source="kubernetes", query=path)
    odd = sorted(set(request.url.params) - _READ_PARAMS)
    if odd:
        raise NotReadOnly(
            f"GET {path} refused: parameters {', '.join(odd)} are not read parameters",
            source="kubernetes",
            query=str(request.url),
        )
    if "upgrade" in request.headers:  # a websocket (exec, attach) is never opened
        raise NotReadOnly(f"GET {path} refused: no connection upgrades", source="kubernetes", query=path)


async def _guard(request: httpx.Request) -> None:
    refuse_unless_read(request)


class ReadOnlyApi(kr8s.asyncio.Api):
    """kr8s's API whose every HTTP session passes the read-only guard.

    kr8s builds its httpx session itself (and again after re-authenticating), so the guard is put on
    each session it builds, as an httpx request hook: a refused request raises before any byte is sent.
    """

    async def _create_session(self) -> None:
        await super()._create_session()
        assert self._session is not None
        hooks = self._session.event_hooks
        self._session.event_hooks = {"request": [_guard, *hooks["request"]], "response": [_capped, *hooks["response"]]}


_capped = size_cap(MAX_ANSWER_BYTES)


async def open_api(
    *,
    auth: str = "auto",
    kubeconfig: Path | None = None,
    context: str | None = None,
    serviceaccount: Path = Path("/var/run/secrets/kubernetes.io/serviceaccount"),
    url: str | None = None,
    timeout_s: float = 10.0,
) -> ReadOnlyApi:
    """A guarded kr8s API authenticated from a kubeconfig, the pod's service account, or either.

    kr8s reads a kubeconfig whenever one is named or found; in-cluster-only auth therefore names one
    that cannot exist (inside the read-only service-account mount), and kubeconfig-only auth gives it
    no service-account directory."""
    kwargs: dict[str, Any] = {"context": context, "url": url}
    if auth == "in_cluster":
        kwargs.update(kubeconfig=str(serviceaccount / ".no-kubeconfig"), serviceaccount=str(serviceaccount))
    elif auth == "kubeconfig":
        kwargs.update(kubeconfig=str(kubeconfig) if kubeconfig else None, serviceaccount="")
    else:
        kwargs.update(kubeconfig=str(kubeconfig) if kubeconfig else None, serviceaccount=str(serviceaccount))
    api = ReadOnlyApi(bypass_factory=True, **kwargs)
    api.timeout = timeout_s
    await api
    return api


# ---------------------------------------------------------------- errors at the boundary

#: kr8s's own exceptions (``kr8s._exceptions``), then httpx's (kr8s lets them through), then parsing.
ERRORS: ErrorTable = (
    (kr8s.APITimeoutError, SourceTimeout),
    (kr8s.ConnectionClosedError, SourceUnavailable),
    (kr8s.NotFoundError, SourceUnavailable),
    (kr8s.ExecError, SourceUnavailable),
    (kr8s.ServerError, SourceUnavailable),
    (OSError, SourceUnavailable),  # a kubeconfig or token file that cannot be read, TLS files
    *HTTPX_ERRORS,
    *MALFORMED,  # ValueError: kr8s's "Unable to find valid credentials", a context that does not exist
)


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return response.status_code if isinstance(response, httpx.Response) else None


def kube_error(exc: BaseException, *, source: str, query: str) -> SourceError:
    """The project error for anything the client raised."""
    if isinstance(exc, SourceError):
        return exc
    status = _status(exc)
    if status is not None:
        body = exc.response.content if isinstance(exc.response, httpx.Response) else b""  # type: ignore[attr-defined]
        return status_error(status)(f"HTTP {status}: {error_text(body)}", source=source, query=query, status=status)
    if isinstance(exc, ValueError) and "credentials" in str(exc):
        return SourceAuthFailed(f"no Kubernetes credentials: {exc}", source=source, query=query)
    if isinstance(exc, ValueError) and "context" in str(exc):
        return SourceUnavailable(str(exc), source=source, query=query)
    return translate(exc, ERRORS, source=source, query=query)


# ---------------------------------------------------------------- readers


def scrub(raw: dict[str, Any]) -> dict[str, Any]:
    """An object without what opsagent must not keep: env values (digested), managed fields, and
    the last-applied copy of the spec."""
    meta = raw.get("metadata") or {}
    meta.pop("managedFields", None)
    (meta.get("annotations") or {}).pop("kubectl.kubernetes.io/last-applied-configuration", None)

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if k == "env" and isinstance(v, list):
                    out[k] = [_digest_env(e) for e in v]
                else:
                    out[k] = walk(v)
            return out
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(raw)


_DIGESTED = re.compile(r"^sha256:[0-9a-f]{12}$")


def _digest_env(entry: Any) -> Any:
    """An env entry with its value digested (once: a recorded object read again stays the same)."""
    if isinstance(entry, dict) and isinstance(entry.get("value"), str) and not _DIGESTED.match(entry["value"]):
        digest = hashlib.sha256(entry["value"].encode()).hexdigest()[:12]
        return {**entry, "value": f"sha256:{digest}"}
    return entry


#: Objects asked for per list request, and the pages one kind's read may take: 200 pages of 500 is
#: 100,000 objects of a kind, past any cluster opsagent is pointed at; an API server that keeps
#: sending ``continue`` is stopped there, and the kind is named as read only in part.
PAGE_SIZE = 500
MAX_PAGES = 200
#: Empty pages in a row that still say ``continue``: an API server fills its pages (it may return
#: fewer items than asked, when a selector filters, but not page after page of none), so a run of
#: them is a server or proxy that will not end the list, stopped here long before the page cap (and
#: before the call's timeout, so that what the first pages held is used).
MAX_EMPTY_PAGES = 10


class _Capped(Exception):
    def __init__(self, what: str, limit: int, unit: str) -> None:
        super().__init__(what)
        self.what, self.limit, self.unit = what, limit, unit


@dataclass
class _ReadBudget:
    """What one kind's read may still take: pages and bytes (across its namespaces)."""

    pages: int
    size: int
    pages_read: int = 0
    bytes_read: int = 0

    def spend_page(self) -> None:
        if self.pages_read >= self.pages:
            raise _Capped(f"{self.pages} pages", self.pages, "pages")
        self.pages_read += 1

    def spend_bytes(self, n: int) -> None:
        self.bytes_read += n
        if self.bytes_read > self.size:
            raise _Capped(f"{self.size:,} bytes", self.size, "bytes")


class KubernetesReader:
    """Objects of one kind in the namespaces it reads (all, when none are named), through kr8s."""

    def __init__(
        self,
        api: Callable[[], Awaitable[kr8s.asyncio.Api]],
        *,
        name: str,
        namespaces: Sequence[str] = (),
        argo_rollouts: bool = True,
        page_size: int = PAGE_SIZE,
        max_pages: int = MAX_PAGES,
        max_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self._open = api
        self.page_size = page_size
        self.max_pages = max_pages
        self.max_bytes = max_bytes
        self._api: kr8s.asyncio.Api | None = None
        self._lock = asyncio.Lock()
        self.name = f"kubernetes:{name}"
        self.namespaces = list(namespaces)
        self.argo_rollouts = argo_rollouts

    async def api(self) -> kr8s.asyncio.Api:
        async with self._lock:
            if self._api is None:
                try:
                    self._api = await self._open()
                except Exception as exc:
                    raise kube_error(exc, source=self.name, query="authenticate") from exc
            return self._api

    async def objects(self, *, kind: KubeKind) -> list[KubeObject]:
        if kind == "Rollout" and not self.argo_rollouts:
            return []
        cls = CLASSES[kind]
        api = await self.api()
        spaces: list[str | None] = list(self.namespaces) if self.namespaces and cls.namespaced else [kr8s.ALL]
        started = time.perf_counter()
        out: list[KubeObject] = []
        budget = _ReadBudget(pages=self.max_pages, size=self.max_bytes)
        for ns in spaces:
            query = f"list {kind} in {ns if ns != kr8s.ALL else 'all namespaces'}"
            try:
                async for raw in self._pages(api, cls, ns, budget):
                    out.append(self._object(kind, cls, raw, query))
            except _Capped as capped:
                raise AnswerTooLarge(
                    f"{kind} list stopped at {capped.what} (the list had not ended): {len(out)} read",
                    source=self.name,
                    query=query,
                    limit=capped.limit,
                    unit=capped.unit,
                    partial=out,
                ) from None
            except Exception as exc:
                if kind == "Rollout" and _status(exc) == 404:
                    return []  # Argo Rollouts is not installed in this cluster
                raise kube_error(exc, source=self.name, query=query) from exc
        log.debug(
            "adapter.query",
            source=self.name,
            kind=kind,
            objects=len(out),
            ms=round((time.perf_counter() - started) * 1000),
        )
        return out

    async def _pages(
        self, api: kr8s.asyncio.Api, cls: type[APIObject], namespace: str | None, budget: _ReadBudget
    ) -> AsyncIterator[Any]:
        """The items of a list, page by page (``limit``/``continue``), within ``budget``. kr8s's own
        ``async_get`` follows ``continue`` for as long as the server sends one: an API server (or a
        proxy) that always does would be listed forever."""
        params: dict[str, Any] = {"limit": self.page_size}
        seen: set[str] = set()
        empty = 0
        while True:
            budget.spend_page()
            async with api.async_get_kind(cls, namespace=namespace, params=dict(params), allow_unknown_type=False) as (
                _,
                response,
            ):
                budget.spend_bytes(len(response.content))
                body = response.json()
            if not isinstance(body, dict) or not isinstance(body.get("items", []), list):
                raise MalformedResponse("a list answer that is not a list", source=self.name)
            items = body.get("items") or []
            for item in items:
                yield item
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return
            empty = 0 if items else empty + 1
            if empty >= MAX_EMPTY_PAGES:
                raise _Capped(f"{empty} empty pages in a row", MAX_EMPTY_PAGES, "pages")
            if str(token) in seen:  # the same page again: a loop, not a list
                raise _Capped("a continue token sent twice", budget.pages_read, "pages")
            seen.add(str(token))
            params["continue"] = token

    def _object(self, kind: KubeKind, cls: type[APIObject], raw: Any, query: str) -> KubeObject:
        if not isinstance(raw, dict):
            raise MalformedResponse(f"a {kind} list item is not an object", source=self.name, query=query)
        raw.setdefault("kind", kind)  # items of a list carry neither kind nor apiVersion
        raw.setdefault("apiVersion", cls.version)
        try:
            return KubeObject.model_validate(scrub(raw))
        except ValueError as exc:
            raise MalformedResponse(f"not a {kind}: {exc}", source=self.name, query=query) from exc

    async def version(self) -> dict[str, Any]:
        """The server's version (for ``opsagent doctor``)."""
        api = await self.api()
        try:
            return dict(await api.async_version())
        except Exception as exc:
            raise kube_error(exc, source=self.name, query="GET /version") from exc

    async def aclose(self) -> None:
        session = getattr(self._api, "_session", None)
        if isinstance(session, httpx.AsyncClient):
            await session.aclose()


__all__ = [
    "CLASSES",
    "ERRORS",
    "KubernetesReader",
    "ReadOnlyApi",
    "kube_error",
    "open_api",
    "refuse_unless_read",
    "scrub",
]
