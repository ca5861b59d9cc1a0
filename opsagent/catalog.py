"""The signal catalog: semantic signals (latency_p99, error_ratio, …) mapped to queries.

Playbooks speak in signals; an environment (config, or a recorded incident's ``signals:``)
overrides entries. The catalog also answers the reverse question triage asks: which signal is
this raw metric name, if any.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import ValidationError

from opsagent import ranking
from opsagent.errors import ConfigError
from opsagent.fixtures import SignalDef
from opsagent.selector import SelectorError, parse

#: A metric name's unit suffix (Prometheus naming: the base unit comes last, before _total).
_UNIT_SUFFIXES = (
    ("_seconds", "s"),
    ("_milliseconds", "ms"),
    ("_ms", "ms"),
    ("_percent", "percent"),
    ("_ratio", "ratio"),
    ("_bytes", "bytes"),
    ("_millicores", "millicores"),
    ("_mebibytes", "MiB"),
)


#: Name words that say which way a metric goes bad (an unlisted metric is read by its name): time
#: taken and failures are bad going up, success and hits going down; anything else either way.
_BAD_UP = re.compile(r"(?:^|_)(?:latency|duration|response_time|errors?|failures?|failed|timeouts?|retries)(?:_|$)")
_BAD_DOWN = re.compile(r"(?:^|_)(?:success|succeeded|availability|available|hits?|uptime)(?:_|$)")


#: Name words of how much work arrives or leaves (bytes, packets, calls, requests): volume, not health.
_VOLUME = re.compile(
    r"(?:^|_)(?:bytes|packets|syscalls?|requests?|ops|qps|rps|throughput|messages|calls|workload)(?:_|$)"
)


def is_volume(metric: str) -> bool:
    """Whether a metric counts how much work a component is given (its callers' doing, mostly)."""
    if not ranking.on("volume"):
        return False
    return _VOLUME.search(metric) is not None and not _BAD_UP.search(metric) and not _BAD_DOWN.search(metric)


_ERRORS = re.compile(r"(?:^|_)(?:errors?|failures?|failed|success|succeeded|availability|available)(?:_|$)")
_LATENCY = re.compile(r"(?:^|_)(?:latency|duration|response_time)(?:_|$)")
_RESOURCES = re.compile(r"(?:^|_)(?:cpu|memory|mem|rss|heap|threads|fds|disk)(?:_|$)")


def meaning_of(metric: str) -> Literal["errors", "latency", "resources", "other"]:
    """What a metric measures, read from its name: failures (or successes), time taken, resources."""
    if _ERRORS.search(metric):
        return "errors"
    if _LATENCY.search(metric):
        return "latency"
    return "resources" if _RESOURCES.search(metric) else "other"


def bad_way(metric: str) -> Literal["up", "down", "any"]:
    """Which way a metric goes bad, read from its name."""
    if not ranking.on("named_direction"):
        return "any"
    if _BAD_DOWN.search(metric):
        return "down"
    return "up" if _BAD_UP.search(metric) else "any"


def unit_of(metric: str) -> str | None:
    """The unit a metric's name states (``_seconds``, ``_ms``, ``_percent``, ``_ratio``, ``_bytes``)."""
    name = metric.removesuffix("_total")
    return next((unit for suffix, unit in _UNIT_SUFFIXES if name.endswith(suffix)), None)


class SignalCatalog:
    def __init__(self, signals: dict[str, SignalDef]) -> None:
        self.signals = dict(signals)
        self._by_metric: dict[str, str] = {}
        for name, sig in self.signals.items():
            try:
                metric = parse(sig.query).name
            except SelectorError:
                continue  # full PromQL: fine live, not reverse-mappable
            if metric:
                self._by_metric.setdefault(metric, name)

    def __contains__(self, signal: str) -> bool:
        return signal in self.signals

    def get(self, signal: str) -> SignalDef | None:
        return self.signals.get(signal)

    def query(self, signal: str, component: str) -> str:
        return self.signals[signal].query.replace("$service", component)

    def limit_query(self, signal: str, component: str) -> str | None:
        limit = self.signals[signal].limit
        return limit.replace("$service", component) if limit else None

    def unlisted(self, metric: str) -> SignalDef:
        """How a metric no signal names is read: its unit and the way that is bad from its name."""
        return SignalDef(query=metric, direction=bad_way(metric), unit=unit_of(metric))

    def signal_of(self, metric_name: str) -> str | None:
        return self._by_metric.get(metric_name)

    def merged(self, overrides: dict[str, SignalDef]) -> SignalCatalog:
        """This catalog with an environment's entries on top; an entry that overrides only the query
        keeps the default's direction, aggregation and limits."""
        signals = dict(self.signals)
        for name, override in overrides.items():
            base = signals.get(name)
            if base is None:
                signals[name] = override
            else:
                signals[name] = SignalDef.model_validate(
                    {**base.model_dump(), **override.model_dump(exclude_unset=True)}
                )
        return SignalCatalog(signals)


@cache
def packaged_signals(name: str) -> dict[str, SignalDef]:
    """A signal catalog shipped in the package (``opsagent/data/<name>.yaml``), read once."""
    text = resources.files("opsagent").joinpath(f"data/{name}.yaml").read_text(encoding="utf-8")
    raw = yaml.safe_load(text)
    try:
        return {signal: SignalDef.model_validate(entry) for signal, entry in raw.items()}
    except ValidationError as exc:  # a packaging mistake, not user input
        raise ConfigError(f"the packaged signal catalog {name}.yaml is invalid: {exc}") from exc


def default_catalog() -> SignalCatalog:
    return SignalCatalog(packaged_signals("signals"))
