"""An in-memory stand-in for the Elasticsearch REST API, for respx.

It answers the requests the logs reader sends with the shapes the real API documents:
- point in time, open and close: https://www.elastic.co/guide/en/elasticsearch/reference/current/point-in-time-api.html
- search with ``pit``, ``search_after``, ``fields``, ``track_total_hits``:
  https://www.elastic.co/guide/en/elasticsearch/reference/current/search-search.html and
  https://www.elastic.co/guide/en/elasticsearch/reference/current/paginate-search-results.html#search-after
- ``filter``, ``terms`` and ``date_histogram`` (``fixed_interval``, ``offset``) aggregations:
  https://www.elastic.co/guide/en/elasticsearch/reference/current/search-aggregations.html
- every answer carries ``X-Elastic-Product: Elasticsearch`` (the client checks it)
It evaluates the subset of the query DSL the reader uses: ``bool.filter`` of ``range``, ``term`` and
``match_phrase`` (as a case-insensitive substring).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
import respx

from opsagent.fixtures import LogRecord

HEADERS = {"X-Elastic-Product": "Elasticsearch", "content-type": "application/json"}
FIELDS = {"@timestamp", "service.name", "log.level", "message", "trace.id", "kubernetes.pod.name"}


def documents(records: Sequence[LogRecord]) -> list[dict[str, Any]]:
    """Log records as ECS documents (flattened field names)."""
    docs = []
    for r in records:
        doc = {
            "@timestamp": r.ts.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "service.name": r.service,
            "log.level": r.level,
            "message": r.message,
        }
        if r.trace_id:
            doc["trace.id"] = r.trace_id
        if r.pod:
            doc["kubernetes.pod.name"] = r.pod
        docs.append(doc)
    return docs


def _ms(value: str) -> float:
    return datetime.fromisoformat(value).timestamp() * 1000


class FakeElasticsearch:
    def __init__(self, docs: list[dict[str, Any]], *, product: bool = True) -> None:
        timed = [{**d, "_ms": _ms(str(d["@timestamp"]))} for d in docs]
        self.docs = sorted(enumerate(timed), key=lambda d: (d[1]["_ms"], d[0]))
        self.product = product
        self.requests: list[tuple[str, str]] = []
        self.open_pits: set[str] = set()
        self.search_bodies: list[dict[str, Any]] = []

    def install(self, router: respx.Router, url: str) -> None:
        router.route(host=httpx.URL(url).host).mock(side_effect=self.handle)

    def _reply(self, body: Any, status: int = 200) -> httpx.Response:
        headers = HEADERS if self.product else {"content-type": "application/json"}
        return httpx.Response(status, json=body, headers=headers)

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.requests.append((request.method, path))
        if request.method == "GET" and path == "/":
            return self._reply(
                {
                    "name": "es-1",
                    "cluster_name": "logs",
                    "version": {"number": "8.15.0", "build_flavor": "default"},
                    "tagline": "You Know, for Search",
                }
            )
        if request.method == "POST" and path.endswith("/_pit"):
            pit = f"pit-{len(self.open_pits) + 1}"
            self.open_pits.add(pit)
            return self._reply({"id": pit, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0}})
        if request.method == "DELETE" and path == "/_pit":
            pit = json.loads(request.content)["id"]
            self.open_pits.discard(pit)
            return self._reply({"succeeded": True, "num_freed": 1})
        if path.endswith("/_field_caps"):
            # https://www.elastic.co/guide/en/elasticsearch/reference/current/search-field-caps.html (GET or POST)
            body = json.loads(request.content) if request.content else {}
            wanted = body.get("fields") or request.url.params.get("fields", "").split(",")
            return self._reply(
                {"indices": ["logs-1"], "fields": {f: {"keyword": {"type": "keyword"}} for f in wanted if f in FIELDS}}
            )
        if request.method == "POST" and path == "/_search":
            return self._reply(self.search(json.loads(request.content)))
        return self._reply({"error": {"type": "unexpected", "reason": f"{request.method} {path}"}}, status=400)

    # ------------------------------------------------------------ search

    def _matches(self, doc: dict[str, Any], clause: dict[str, Any]) -> bool:
        if "bool" in clause:
            b = clause["bool"]
            if not all(self._matches(doc, c) for c in b.get("filter", [])):
                return False
            should = b.get("should", [])
            return not should or sum(self._matches(doc, c) for c in should) >= b.get("minimum_should_match", 1)
        if "range" in clause:
            ((field, bounds),) = clause["range"].items()
            t = doc["_ms"] if field == "@timestamp" else _ms(doc[field])
            return not ("gte" in bounds and t < _ms(bounds["gte"])) and not ("lt" in bounds and t >= _ms(bounds["lt"]))
        if "term" in clause:
            ((field, value),) = clause["term"].items()
            return bool(doc.get(field) == value)
        if "match_phrase" in clause:
            ((field, value),) = clause["match_phrase"].items()
            return bool(value.lower() in str(doc.get(field, "")).lower())
        raise AssertionError(f"the fake does not evaluate {clause}")

    def search(self, body: dict[str, Any]) -> dict[str, Any]:
        self.search_bodies.append(body)
        assert body["pit"]["id"] in self.open_pits, "search on a closed point in time"
        matched = [(i, d) for i, d in self.docs if self._matches(d, body["query"])]
        after = body.get("search_after")
        keyed = [((d["_ms"], i), i, d) for i, d in matched]
        if after is not None:
            keyed = [k for k in keyed if k[0] > (after[0], after[1])]
        page = keyed[: body["size"]]
        fields = [f["field"] for f in body["fields"]]
        hits = [
            {
                "_index": "logs-1",
                "_id": str(i),
                "_score": None,
                "fields": {f: [d[f]] for f in fields if f in d and f != "_ms"},
                "sort": [int(key[0]), key[1]],
            }
            for key, i, d in page
        ]
        out: dict[str, Any] = {
            "pit_id": body["pit"]["id"],
            "took": 3,
            "timed_out": False,
            "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
            "hits": {"max_score": None, "hits": hits},
        }
        if body.get("track_total_hits"):
            out["hits"]["total"] = {"value": len(matched), "relation": "eq"}
        if "aggregations" in body:
            out["aggregations"] = self._aggregations(body["aggregations"], [d for _, d in matched])
        return out

    def _aggregations(self, aggs: dict[str, Any], docs: list[dict[str, Any]]) -> dict[str, Any]:
        window = aggs["window"]
        in_window = [d for d in docs if self._matches(d, window["filter"])]
        level = window["aggs"]["levels"]["terms"]["field"]
        service = window["aggs"]["services"]["terms"]["field"]
        histogram = aggs["histogram"]["date_histogram"]
        step_ms = int(histogram["fixed_interval"].rstrip("s")) * 1000
        offset_ms = int(histogram["offset"].strip("+s")) * 1000
        buckets: dict[int, list[dict[str, Any]]] = {}
        for d in docs:
            t = d["_ms"]
            key = int((t - offset_ms) // step_ms * step_ms + offset_ms)
            buckets.setdefault(key, []).append(d)
        return {
            "window": {
                "doc_count": len(in_window),
                "levels": _terms(in_window, level),
                "services": _terms(in_window, service),
            },
            "histogram": {
                "buckets": [
                    {
                        "key_as_string": datetime.fromtimestamp(k / 1000, tz=UTC).isoformat().replace("+00:00", "Z"),
                        "key": k,
                        "doc_count": len(group),
                        "levels": _terms(group, level),
                    }
                    for k, group in sorted(buckets.items())
                ]
            },
        }


def _terms(docs: list[dict[str, Any]], field: str) -> dict[str, Any]:
    counts = Counter(d[field] for d in docs if field in d)
    return {
        "doc_count_error_upper_bound": 0,
        "sum_other_doc_count": 0,
        "buckets": [{"key": k, "doc_count": n} for k, n in counts.most_common()],
    }
