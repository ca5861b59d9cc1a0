"""A Grafana Loki read path, served through respx, in Loki's real answer shapes.

From the Loki HTTP API reference (https://grafana.com/docs/loki/latest/reference/loki-http-api/):
* ``GET /loki/api/v1/query_range`` with ``query``, ``start``/``end`` (unix ns; start inclusive, end
  exclusive), ``limit``, ``direction``; log queries answer
  ``{"status": "success", "data": {"resultType": "streams", "result": [{"stream": {labels}, "values":
  [["<unix ns>", "<line>"], …]}], "stats": {…}}}``; metric queries answer ``resultType: "matrix"``
  with ``{"metric": {labels}, "values": [[<unix s>, "<value>"], …]}`` at each ``step``;
* ``GET /loki/api/v1/query`` (instant, ``time``): ``resultType: "vector"``, ``{"metric", "value": [t, "v"]}``;
* errors: a plain-text body with the status (``parse error at line 1, col 2: …`` with 400);
* ``GET /loki/api/v1/status/buildinfo``: ``{"version", "revision", "branch", "goVersion", …}``.

It evaluates the LogQL subset the reader writes: a stream selector of ``=`` / ``=~`` matchers, a
``|~ "(?i)…"`` line filter, and ``sum [by (label)] (count_over_time(<log query> [Ns]))``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import httpx
import respx

from opsagent.fixtures import LogRecord

_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
_COUNT = re.compile(r"^sum(?: by \((?P<by>[^)]*)\))? \(count_over_time\((?P<inner>.*) \[(?P<range>\d+)s\]\)\)$")


def _unquote(s: str) -> str:
    return s.encode().decode("unicode_escape")


class FakeLoki:
    def __init__(self, records: Iterable[LogRecord], *, labels: dict[str, str] | None = None) -> None:
        """``labels`` maps a record field to the stream label holding it (the rest is the line)."""
        names = labels or {"service": "service_name", "level": "detected_level", "pod": "pod"}
        self.entries: list[tuple[int, dict[str, str], str]] = []
        for r in records:
            stream = {"namespace": "prod"}
            for field, label in names.items():
                value = getattr(r, field)
                if value:
                    stream[label] = str(value)
            self.entries.append((int(r.ts.timestamp() * 1e9), stream, r.message))
        self.entries.sort(key=lambda e: e[0])
        self.requests: list[httpx.Request] = []
        self.fail: httpx.Response | None = None

    def install(self, router: respx.Router, base: str) -> None:
        router.route(host=httpx.URL(base).host).mock(side_effect=self.answer)

    # ------------------------------------------------------------ LogQL

    def _select(self, query: str) -> list[tuple[int, dict[str, str], str]]:
        selector, _, rest = query.partition("}")
        matchers = [(k, op, _unquote(v)) for k, op, v in _MATCHER.findall(selector.lstrip("{"))]
        pattern = None
        found = re.search(r'\|~ "((?:[^"\\]|\\.)*)"', rest)
        if found:
            pattern = re.compile(_unquote(found.group(1)))

        def keep(stream: dict[str, str], line: str) -> bool:
            for k, op, v in matchers:
                have = stream.get(k, "")
                if (op == "=" and have != v) or (op == "!=" and have == v):
                    return False
                if op == "=~" and not re.fullmatch(v, have):
                    return False
            return pattern is None or bool(pattern.search(line))

        return [e for e in self.entries if keep(e[1], e[2])]

    def _count(self, query: str, at_ns: int) -> dict[str, int]:
        m = _COUNT.match(query)
        assert m is not None, query
        by = m["by"]
        lo = at_ns - int(m["range"]) * 1_000_000_000
        out: dict[str, int] = defaultdict(int)
        for ts, stream, _ in self._select(m["inner"]):
            if lo < ts <= at_ns:  # a range vector (t - range, t]
                out[stream.get(by, "") if by else ""] += 1
        return dict(out)

    # ------------------------------------------------------------ HTTP

    def answer(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.fail is not None:
            return self.fail
        p = request.url.params
        path = request.url.path
        if request.method != "GET":
            return httpx.Response(405, text="method not allowed")
        if path == "/loki/api/v1/status/buildinfo":
            return httpx.Response(
                200, json={"version": "3.4.2", "revision": "d7ae5b1", "branch": "HEAD", "goVersion": "go1.23.6"}
            )
        query = p["query"]
        if path == "/loki/api/v1/query":
            at = int(p["time"])
            counts = self._count(query, at)
            by = _COUNT.match(query)["by"]  # type: ignore[index]
            result = [{"metric": {by: k} if by and k else {}, "value": [at / 1e9, str(n)]} for k, n in counts.items()]
            return self._ok({"resultType": "vector", "result": result})
        if path != "/loki/api/v1/query_range":
            return httpx.Response(404, text="404 page not found")
        start, end = int(p["start"]), int(p["end"])
        if query.startswith("sum"):
            step = int(p["step"].rstrip("s")) * 1_000_000_000
            series: dict[str, list[list[Any]]] = defaultdict(list)
            for t in range(start, end + 1, step):
                for key, n in self._count(query, t).items():
                    series[key].append([t / 1e9, str(n)])
            by = _COUNT.match(query)["by"]  # type: ignore[index]
            result = [{"metric": {by: k} if by and k else {}, "values": v} for k, v in series.items()]
            return self._ok({"resultType": "matrix", "result": result})
        limit = int(p.get("limit", "100"))
        picked = [e for e in self._select(query) if start <= e[0] < end][:limit]
        streams: dict[tuple[tuple[str, str], ...], list[list[str]]] = defaultdict(list)
        for ts, stream, line in picked:
            streams[tuple(sorted(stream.items()))].append([str(ts), line])
        result = [{"stream": dict(k), "values": v} for k, v in streams.items()]
        return self._ok(
            {"resultType": "streams", "result": result, "stats": {"summary": {"totalLinesProcessed": len(picked)}}}
        )

    @staticmethod
    def _ok(data: dict[str, Any]) -> httpx.Response:
        return httpx.Response(200, json={"status": "success", "data": data})
