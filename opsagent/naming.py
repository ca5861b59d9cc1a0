"""Metric-name conventions: what a metric's name says about it (its unit, which way is bad, whether
it counts volume, what it measures). Prometheus' conventions and the common exporters' words; an
environment that says otherwise in its signal catalog wins."""

from __future__ import annotations

import re
from typing import Literal

from opsagent import ranking

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
