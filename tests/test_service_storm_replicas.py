"""Alert storms across web replicas, on both backends: two app instances on one store (the SQLite
file, and the session's real PostgreSQL) correlate against the same storms, so a storm whose alerts
reach different replicas, one after another or at the same moment, is one incident, and the
unrelated alert of the same minutes stays apart. The storms the store holds stay capped."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from opsagent.service.app import create_app
from opsagent.store import Store, StoreLocation
from tests.service_support import AUTH, notification, settings
from tests.test_service_storms import APART, JOINED, LEAD, OTHERS, alone, group_of, post, shifted

#: Storms posted at the same moment to both replicas, each hours from the last (never joined).
ROUNDS = 12


@pytest.fixture
def replicas(tmp_path: Path, store_location: StoreLocation) -> Iterator[list[TestClient]]:
    """Two web replicas (accept and serve pages, run no investigation) on the test's store."""
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                TestClient(
                    create_app(
                        settings(
                            tmp_path / f"r{i}",
                        ),
                        role="web",
                    ),
                    headers=AUTH,
                )
            )
            for i in range(2)
        ]


def test_a_storm_whose_alerts_reach_different_replicas_is_one_incident(
    replicas: list[TestClient], store_location: StoreLocation
) -> None:
    one, two = replicas
    lead = post(one, alone(LEAD))
    assert lead["action"] == "opened"
    for i, name in enumerate(JOINED):
        joined = post([two, one][i % 2], alone(OTHERS[name]))
        assert (joined["action"], joined["incident_id"]) == ("updated", lead["incident_id"]), name
    apart = post(two, alone(OTHERS[APART]))
    assert apart["action"] == "opened" and apart["incident_id"] != lead["incident_id"]
    # a re-notification of a joined group, to the other replica, still goes to the storm
    again = post(one, alone(OTHERS[JOINED[-1]]))
    assert (again["action"], again["incident_id"]) == ("updated", lead["incident_id"])
    # the storm resolves with its last alert, whichever replica hears each end
    ends = [post(two, alone(LEAD, status="resolved"))]
    ends += [post([one, two][i % 2], alone(OTHERS[name], status="resolved")) for i, name in enumerate(JOINED)]
    assert [e["action"] for e in ends] == ["updated"] * len(JOINED) + ["resolved"]
    assert {e["incident_id"] for e in ends} == {lead["incident_id"]}
    with Store(store_location) as store:
        assert {r.id for r in store.incidents()} == {lead["incident_id"], apart["incident_id"]}
        # the resolved storm is forgotten; the unrelated alert's storm is still held
        assert [h.storm.key for h in store.storms()] == [group_of(OTHERS[APART])]


def test_two_replicas_receiving_a_storm_at_the_same_moment_open_one_incident(
    replicas: list[TestClient], store_location: StoreLocation
) -> None:
    two = replicas[1]
    storms: list[set[str]] = []
    apart: list[str] = []
    for round_ in range(ROUNDS):
        by = -timedelta(hours=round_ + 1)
        alerts = [shifted(a, by) for a in (LEAD, *(OTHERS[n] for n in JOINED))]
        bodies = [notification([a], group_key=f"r{round_}-{a['labels']['alertname']}") for a in alerts]
        start = threading.Barrier(len(bodies))

        def send(client: TestClient, body: dict[str, Any], start: threading.Barrier = start) -> dict[str, Any]:
            start.wait(timeout=30)
            return post(client, body)

        with ThreadPoolExecutor(len(bodies)) as pool:
            answers = list(pool.map(send, [replicas[i % 2] for i in range(len(bodies))], bodies))
        assert sorted(a["action"] for a in answers) == ["opened"] + ["updated"] * (len(bodies) - 1), round_
        storms.append({a["incident_id"] for a in answers})
        apart.append(post(two, notification([shifted(OTHERS[APART], by)], group_key=f"r{round_}-apart"))["incident_id"])
    assert all(len(s) == 1 for s in storms)
    ids = [next(iter(s)) for s in storms]
    assert len(set(ids)) == ROUNDS and not set(ids) & set(apart)
    with Store(store_location) as store:
        assert store.notification_count() == ROUNDS * (len(JOINED) + 2)
        assert len(store.incidents(limit=500)) == 2 * ROUNDS


def test_the_storms_the_store_holds_stay_capped_whichever_replica_adds_them(
    tmp_path: Path, store_location: StoreLocation
) -> None:
    caps = {"max_storms": 5, "max_members": 4}
    apps = [create_app(settings(tmp_path / f"r{i}", correlation=caps), role="web") for i in range(2)]
    with TestClient(apps[0], headers=AUTH) as one, TestClient(apps[1], headers=AUTH) as two:
        for i in range(20):  # unconnected alerts: a storm each
            body = notification(
                [
                    {
                        "labels": {"alertname": f"Lonely{i}", "service": f"svc-{i}"},
                        "startsAt": LEAD["startsAt"],
                        "fingerprint": f"lonely-{i}",
                        "status": "firing",
                    }
                ],
                group_key=f"lonely-{i}",
            )
            assert post([one, two][i % 2], body)["action"] == "opened"
        pods = [shifted(LEAD, timedelta(seconds=i), pod=f"p{i}") for i in range(30)]
        storm = post(one, notification(pods, group_key="pods"))
        assert storm["incident_ids"] == [storm["incident_id"]]
    with Store(store_location) as store:
        held = store.storms()
        assert len(held) == 5 and store.storm_fingerprints() <= 5 * 4
        assert held[-1].storm.key == "pods" and held[-1].storm.count == 30 and len(held[-1].storm.members) == 4
        assert [h.storm.key for h in held[:-1]] == [f"lonely-{i}" for i in range(16, 20)]  # the most recent kept


def test_a_storm_is_stored_with_its_alerts_texts_redacted(
    replicas: list[TestClient], store_location: StoreLocation
) -> None:
    leaky = copy.deepcopy(LEAD)
    leaky["annotations"]["summary"] = "cart slow; db url has password=hunter2hunter2"
    post(replicas[0], alone(leaky))
    with Store(store_location) as store:
        (held,) = store.storms()
    assert "hunter2" not in held.storm.members[0].summary and held.storm.members[0].summary.startswith("cart slow")
