"""Live sources built from configuration (:mod:`adapters.sourceconfig`), and the live catalog.

:func:`open_live_sources` builds a reader per configured instance (secrets from the environment),
wraps them (rate limit, recording), fans several instances of a kind into one, and puts the live
sources over them; the :class:`LiveSources` it returns owns the clients and closes them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import httpx
import structlog

from adapters.baseconfig import HttpSourceConfig
from adapters.changes_git.config import GitConfig
from adapters.changes_git.reader import GitChangesReader, git_cli
from adapters.changes_http.config import ChangeFeedConfig
from adapters.changes_http.reader import HttpChangesReader
from adapters.elasticsearch.config import ElasticsearchConfig
from adapters.elasticsearch.reader import ElasticsearchReader, elasticsearch_client
from adapters.jaeger.config import JaegerConfig
from adapters.jaeger.reader import JaegerReader
from adapters.kubernetes.config import KubernetesConfig
from adapters.kubernetes.reader import KubernetesReader, open_api
from adapters.loki.config import LokiConfig
from adapters.loki.reader import LokiReader
from adapters.prometheus.config import PrometheusConfig
from adapters.prometheus.reader import PrometheusReader, prometheus_client
from adapters.sourceconfig import AnySourceConfig, SourcesConfig
from adapters.tempo.reader import TempoReader
from adapters.wrappers import RateLimiter, Recorder, rate_limited, recorded
from opsagent.catalog import SignalCatalog, default_catalog, packaged_signals
from opsagent.errors import SourceUnavailable
from opsagent.fixtures import Change, Edge, KubeObject, MetricSeries, SignalDef, Span
from opsagent.logsummary import Summariser
from opsagent.models import Alert
from opsagent.plan import Reading, SeriesReader
from opsagent.sizecap import size_cap
from opsagent.sources import Sources
from opsagent.sources.kubernetes import KubernetesState, RolloutChanges, live_last_words
from opsagent.sources.live import (
    ChangesFanOut,
    KubernetesFanOut,
    LiveChanges,
    LiveLogs,
    LiveMetrics,
    LiveTraces,
    LogsFanOut,
    MetricsFanOut,
    TracesFanOut,
)
from opsagent.sources.queries import LogBatch
from opsagent.sources.readers import ChangesReader, LogsReader, MetricsReader, TracesReader
from opsagent.sources.readers import KubernetesReader as KubeReader

if TYPE_CHECKING:
    from opsagent.settings import Settings

log = structlog.get_logger("opsagent.adapters")

# ---------------------------------------------------------------- the live catalog


def live_catalog(overrides: Mapping[str, SignalDef] | None = None) -> SignalCatalog:
    """The replay catalog with the live PromQL defaults on top, then a deployment's overrides."""
    return default_catalog().merged(packaged_signals("signals_live")).merged(dict(overrides or {}))


def scan_catalog(overrides: Mapping[str, SignalDef] | None = None) -> SignalCatalog:
    """The catalog triage's scan names series by: metric names map to signals only through plain
    selectors, so the replay catalog and a deployment's selector overrides."""
    return default_catalog().merged(dict(overrides or {}))


# ---------------------------------------------------------------- building


def httpx_client(
    config: HttpSourceConfig, environ: Mapping[str, str], *, headers: Mapping[str, str] | None = None
) -> httpx.AsyncClient:
    token, basic = config.credentials(environ)
    headers = {**config.headers, **(headers or {})}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.AsyncClient(
        base_url=config.url,
        headers=headers,
        auth=basic,
        verify=config.verify,
        timeout=config.timeout_s,
        event_hooks={"response": [size_cap()]},
    )


def reader_for(config: AnySourceConfig, environ: Mapping[str, str]) -> Any:
    """One reader for one configured instance (no wrappers)."""
    if isinstance(config, PrometheusConfig):
        token, basic = config.credentials(environ)
        client = prometheus_client(
            config.url,
            token=token,
            username=basic[0] if basic else None,
            password=basic[1] if basic else None,
            verify=config.verify,
            timeout_s=config.timeout_s,
            headers=config.headers,
        )
        return PrometheusReader(
            client,
            name=config.name,
            max_points=config.max_points,
            min_step_s=config.min_step_s,
            scan_match=config.scan_match,
            scan_max_series=config.scan_max_series,
            concurrency=config.concurrency,
        )
    if isinstance(config, ElasticsearchConfig):
        es = elasticsearch_client(
            config.url,
            flavour=config.flavour,
            api_key=config.secret("api_key", environ) if config.auth == "api_key" else None,
            username=config.username if config.auth == "basic" else None,
            password=config.secret("password", environ) if config.auth == "basic" else None,
            verify=config.verify,
            timeout_s=config.timeout_s,
        )
        return ElasticsearchReader(
            es,
            name=config.name,
            index=config.index,
            fields=config.fields,
            flavour=config.flavour,
            max_hits=config.max_hits,
            page_size=config.page_size,
        )
    if isinstance(config, LokiConfig):
        tenant = {"X-Scope-OrgID": config.tenant} if config.tenant else None
        return LokiReader(
            httpx_client(config, environ, headers=tenant),
            name=config.name,
            labels=config.labels,
            selector=config.selector,
            parser=config.parser,
            max_lines=config.max_lines,
            page_size=config.page_size,
        )
    if isinstance(config, KubernetesConfig):
        cfg = config
        return KubernetesReader(
            lambda: open_api(
                auth=cfg.auth,
                kubeconfig=cfg.kubeconfig,
                context=cfg.context,
                serviceaccount=cfg.serviceaccount,
                timeout_s=cfg.timeout_s,
            ),
            name=cfg.name,
            namespaces=cfg.namespaces,
            argo_rollouts=cfg.argo_rollouts,
        )
    if isinstance(config, GitConfig):
        return GitChangesReader(
            git_cli(config.path, timeout_s=config.timeout_s),
            name=config.name,
            rules=config.rules,
            ref=config.ref,
            config_files=config.config_files,
            commit_url=config.commit_url,
        )
    if isinstance(config, ChangeFeedConfig):
        return HttpChangesReader(
            httpx_client(config, environ), name=config.name, query=config.query, fields=config.fields
        )
    if isinstance(config, JaegerConfig):
        return JaegerReader(
            httpx_client(config, environ),
            name=config.name,
            max_traces=config.max_traces,
            max_services=config.max_services,
        )
    return TempoReader(httpx_client(config, environ), name=config.name, max_traces=config.max_traces)


async def close_reader(reader: Any) -> None:
    """Close the client a reader holds, whatever kind it is."""
    if isinstance(reader, KubernetesReader):
        await reader.aclose()
        return
    client = getattr(reader, "client", None)
    if isinstance(client, httpx.AsyncClient):
        await client.aclose()
    elif client is not None and hasattr(client, "close"):
        result = client.close()
        if hasattr(result, "__await__"):
            await result


@dataclass
class LiveSources:
    """The sources an investigation reads, the catalog to read them with, and the clients to close."""

    sources: Sources
    catalog: SignalCatalog
    readers: list[Any] = field(default_factory=list)

    def reading(self, alert: Alert, *, series: SeriesReader | None = None) -> Reading:
        """What an investigation of ``alert`` reads here; the reading's ``close`` closes the clients."""
        return Reading(
            name="live", alert=alert, sources=self.sources, catalog=self.catalog, series=series, close=self.aclose
        )

    async def aclose(self) -> None:
        for reader in self.readers:
            await close_reader(reader)

    async def __aenter__(self) -> LiveSources:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


#: The telemetry each configured kind of source reads: names sources in reports (``metrics:main``).
READS = {
    "prometheus": "metrics",
    "elasticsearch": "logs",
    "loki": "logs",
    "git": "changes",
    "change_feed": "changes",
    "jaeger": "traces",
    "tempo": "traces",
    "kubernetes": "kubernetes",
}


class Unopened:
    """A configured source whose client could not be built (a CA bundle that is not there, a
    setting the client refuses): every read fails with the reason, so an investigation names the
    source among those it could not read and goes on with the others."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason

    def _refuse(self) -> NoReturn:
        raise SourceUnavailable(f"could not be opened: {self.reason}", source=self.name)

    async def series(self, **_: object) -> list[MetricSeries]:
        self._refuse()

    async def everything(self, **_: object) -> list[MetricSeries]:
        self._refuse()

    async def records(self, **_: object) -> LogBatch:
        self._refuse()

    async def changes(self, **_: object) -> list[Change]:
        self._refuse()

    async def spans(self, **_: object) -> list[Span]:
        self._refuse()

    async def edges(self, **_: object) -> list[Edge]:
        self._refuse()

    async def objects(self, **_: object) -> list[KubeObject]:
        self._refuse()


def open_live_sources(
    config: SourcesConfig,
    *,
    signals: Mapping[str, SignalDef] | None = None,
    environ: Mapping[str, str] | None = None,
    recorder: Recorder | None = None,
    summariser: Summariser | None = None,
) -> LiveSources:
    """Readers for every configured instance, wrapped (rate limit, recording), several of a kind
    fanned into one, under the live sources."""
    env = os.environ if environ is None else environ
    raw: list[Any] = []
    by_kind: dict[str, list[Any]] = {"metrics": [], "logs": [], "changes": [], "traces": [], "kubernetes": []}
    labels: list[str] = []
    for cfg in config.all():
        try:
            reader = reader_for(cfg, env)
        except Exception as exc:  # a third-party client refusing its settings: that source only is lost
            reason = f"{type(exc).__name__}: {exc}"
            log.warning("source.unopened", source=f"{cfg.kind}:{cfg.name}", error=reason)
            reader = Unopened(f"{READS[cfg.kind]}:{cfg.name}", reason)
        raw.append(reader)
        if isinstance(cfg, KubernetesConfig):
            labels.extend(label for label in cfg.service_labels if label not in labels)
        wrapped: Any = reader
        if cfg.rate_limit_per_s:
            wrapped = rate_limited(wrapped, RateLimiter(rate=cfg.rate_limit_per_s))
        if recorder is not None:
            wrapped = recorded(wrapped, recorder)
        by_kind[reader.name.split(":")[0]].append(wrapped)
    catalog = live_catalog(signals)
    metrics: Sequence[MetricsReader] = by_kind["metrics"]
    logs: Sequence[LogsReader] = by_kind["logs"]
    changes: Sequence[ChangesReader] = by_kind["changes"]
    traces: Sequence[TracesReader] = by_kind["traces"]
    kube: Sequence[KubeReader] = by_kind["kubernetes"]
    state = (
        KubernetesState(
            kube[0] if len(kube) == 1 else KubernetesFanOut(kube),
            service_labels=labels,
            # a crash loop is explained by its containers' last lines, read from the logs source
            last_words=live_last_words(logs[0] if len(logs) == 1 else LogsFanOut(logs)) if logs else None,
        )
        if kube
        else None
    )
    if state is not None:  # the clusters' rollout history is a change source beside the others
        changes = [*changes, RolloutChanges(state)]
    sources = Sources(
        metrics=LiveMetrics(
            metrics[0] if len(metrics) == 1 else MetricsFanOut(metrics),
            catalog=catalog,
            scan_catalog=scan_catalog(signals),
        )
        if metrics
        else None,
        logs=LiveLogs(logs[0] if len(logs) == 1 else LogsFanOut(logs), summariser=summariser) if logs else None,
        changes=LiveChanges(changes[0] if len(changes) == 1 else ChangesFanOut(changes)) if changes else None,
        traces=LiveTraces(traces[0] if len(traces) == 1 else TracesFanOut(traces)) if traces else None,
        kubernetes=state,
    )
    return LiveSources(sources=sources, catalog=catalog, readers=raw)


def sources_from_settings(settings: Settings, *, recorder: Recorder | None = None) -> LiveSources:
    """What ``opsagent investigate ALERT_FILE`` reads: every source the settings configure."""
    return open_live_sources(settings.sources, signals=settings.signals, recorder=recorder)
