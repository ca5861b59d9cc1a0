"""The signal catalog: semantic signals (latency_p99, error_ratio, …) mapped to queries.

Playbooks speak in signals; an environment (config, or a recorded incident's ``signals:``)
overrides entries. The catalog also answers the reverse question triage asks: which signal is
this raw metric name, if any.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml
from pydantic import ValidationError

from opsagent.errors import ConfigError
from opsagent.fixtures import SignalDef
from opsagent.naming import bad_way, unit_of
from opsagent.selector import SelectorError, parse


class SignalCatalog:
    def __init__(self, signals: dict[str, SignalDef], *, explicit: frozenset[str] = frozenset()) -> None:
        self.signals = dict(signals)
        #: the signals an environment set (configuration, a recording's ``signals:``): discovery keeps them
        self.explicit = explicit
        self._by_metric: dict[str, str] = {}
        # a metric no signal names, read once: a scan asks for each of its series' metric several times
        self._unlisted: dict[str, SignalDef] = {}
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
        found = self._unlisted.get(metric)
        if found is None:
            found = self._unlisted[metric] = SignalDef(query=metric, direction=bad_way(metric), unit=unit_of(metric))
        return found

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
        return SignalCatalog(signals, explicit=self.explicit | frozenset(overrides))

    def with_discovered(self, found: dict[str, SignalDef], present: set[str]) -> SignalCatalog:
        """This catalog with discovered signals filling its gaps: an explicit signal stays, and so
        does a default whose metric the environment has (``present``: its metric names)."""
        signals = dict(self.signals)
        for name, signal in found.items():
            current = signals.get(name)
            if name in self.explicit or (current is not None and _metric(current.query) in present):
                continue
            signals[name] = signal
        return SignalCatalog(signals, explicit=self.explicit)


def _metric(query: str) -> str | None:
    try:
        return parse(query).name
    except SelectorError:
        return None


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
