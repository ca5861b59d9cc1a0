"""What sharing one store between replicas needs, on both backends: dedup held by the database,
leases that never hand one job to two workers, lessons whose concurrent updates all count,
migrations from an empty database and from the previous release, the store's address and
password, and every PostgreSQL client error mapped to a StoreError."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import psycopg_pool
import pytest
from pydantic import SecretStr

from opsagent.settings import Settings
from opsagent.store import JobOutcome, NotificationIn, ServiceStore, Store, StoreError, StoreLocation, schema_version
from opsagent.store.postgres import mapped_errors
from tests.conftest import ROOT
from tests.test_lessons import lesson
from tests.test_service_queue import note

PREVIOUS_RELEASE = ROOT / "tests" / "data" / "store-schema3.sql"


# ---------------------------------------------------------------- dedup across replicas


def test_one_open_incident_per_group_is_a_database_constraint(store_location: StoreLocation) -> None:
    with Store(store_location) as store:
        opened = store.accept([note("g")])[0]
    errors = (sqlite3.IntegrityError, psycopg.errors.UniqueViolation)
    insert = (
        "INSERT INTO incidents (id, group_key, state, investigation, service, alertname, title, receiver,"
        " created_at, updated_at) VALUES ('inc-second', 'g', 'firing', 'queued', 's', 'a', 't', 'r', 'x', 'x')"
    )
    second_job = f"INSERT INTO jobs (incident_id, notification_id, status, created_at, updated_at) VALUES ('{opened.incident_id}', 1, 'queued', 'x', 'x')"
    for statement in (insert, second_job):  # whatever code writes, the database refuses a second one
        with pytest.raises(errors):
            if store_location.kind == "sqlite":
                with sqlite3.connect(store_location.path) as db:
                    db.execute(statement)
            else:
                assert store_location.password is not None
                with psycopg.connect(store_location.url, password=store_location.password.get_secret_value()) as db:
                    db.execute(statement)


def test_the_same_groups_posted_to_two_replicas_at_once_open_one_incident_each(store_location: StoreLocation) -> None:
    """Two service processes (two pools or two writer threads), the same 30 groups in opposite
    orders, each group's notifications several times: one incident and one job per group."""
    groups = [f"group-{i}" for i in range(30)]

    async def replica(order: list[str]) -> list[str | None]:
        store = await ServiceStore.open(store_location)
        try:
            seen: list[str | None] = []
            for start in range(0, len(order), 5):  # batches, as the inbox commits them
                batch = [note(g) for g in order[start : start + 5] for _ in range(2)]
                seen += [a.incident_id for a in await store.accept(batch)]
            return seen
        finally:
            await store.close()

    async def both() -> tuple[list[str | None], list[str | None]]:
        first, second = await asyncio.gather(replica(groups), replica(groups[::-1]))
        return first, second

    first, second = asyncio.run(both())
    with Store(store_location) as store:
        incidents = store.incidents(limit=1000)
        assert sorted(i.group_key for i in incidents) == sorted(groups)  # one per group
        assert store.job_counts()["queued"] == len(groups) and store.notification_count() == 4 * len(groups)
        assert {i.notifications for i in incidents} == {4}
    by_group = {i.group_key: i.id for i in incidents}
    assert set(first) == set(second) == set(by_group.values())


# ---------------------------------------------------------------- leases


def test_concurrent_claims_never_lease_one_job_twice(store_location: StoreLocation) -> None:
    with Store(store_location) as store:
        store.accept([note(f"g{i}") for i in range(40)])
    claimed: list[int] = []
    lock = threading.Lock()

    def worker(name: str) -> None:
        with Store(store_location, timeout_s=30) as store:
            while (job := store.claim_job(owner=f"h:{name}:t", now=1000.0, lease_s=60, max_attempts=3)) is not None:
                with lock:
                    claimed.append(job.id)
                store.finish_job(job.id, owner=f"h:{name}:t", now=datetime.now(UTC), outcome=JobOutcome(outcome="x"))

    threads = [threading.Thread(target=worker, args=(str(n),)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(claimed) == sorted(set(claimed)) and len(claimed) == 40
    with Store(store_location) as store:
        assert store.job_counts() == {"queued": 0, "running": 0, "done": 40, "failed": 0}


def test_a_claimed_job_brings_the_later_firing_notifications_of_its_incident(store_location: StoreLocation) -> None:
    """An alert storm's later alerts join the incident as notifications of its key: the job that
    investigates it reads them with the one that opened it, not the resolved ones or another's."""

    def carrying(group: str, payload: str, status: str = "firing") -> NotificationIn:
        return note(group, status).model_copy(update={"payload": payload})

    with Store(store_location) as store:
        store.accept([carrying("storm", '{"n": 1}'), carrying("other", '{"n": 9}')])
        store.accept([carrying("storm", '{"n": 2}'), carrying("storm", '{"n": 3}')])
        store.accept([carrying("storm", '{"n": 4}', "resolved")])
        job = store.claim_job(owner="h:1:t", now=1000.0, lease_s=60, max_attempts=3)
        assert job is not None and (job.payload, job.joined) == ('{"n": 1}', ['{"n": 2}', '{"n": 3}'])
        other = store.claim_job(owner="h:1:t", now=1000.0, lease_s=60, max_attempts=3)
        assert other is not None and (other.payload, other.joined) == ('{"n": 9}', [])


# ---------------------------------------------------------------- lessons shared


def test_a_lesson_learnt_through_one_replica_is_read_through_another(store_location: StoreLocation) -> None:
    with Store(store_location) as one, Store(store_location) as other:
        taught = one.upsert_lesson(lesson(source_incident="inc-1"))[0]
        assert [le.id for le in other.lessons()] == [taught.id]


def test_concurrent_feedback_on_two_replicas_loses_no_update(store_location: StoreLocation) -> None:
    """Two processes' worth of connections merge the same lesson and count its use at once: every
    merge and every count is kept (merges lock the row; counts are incremented in SQL)."""
    with Store(store_location) as store:
        first = store.upsert_lesson(lesson(source_incident="inc-0"))[0]
    rounds = 25

    def replica(name: str) -> None:
        with Store(store_location, timeout_s=30) as store:
            for i in range(rounds):
                store.upsert_lesson(lesson(source_incident=f"inc-{name}-{i}"))
                store.count_use([first.id], counter="helped")
                store.count_use([first.id], counter="misled")

    threads = [threading.Thread(target=replica, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    with Store(store_location) as store:
        final = store.lesson(first.id)
    assert final.count == 1 + 2 * rounds
    assert final.times_helped == 2 * rounds and final.times_misled == 2 * rounds
    assert len(final.seen_in) == 1 + 2 * rounds  # every merge's incident is in it


# ---------------------------------------------------------------- migrations


def test_migrations_from_an_empty_database(store_location: StoreLocation) -> None:
    with Store(store_location) as store:
        assert store.schema_version() == schema_version()
        assert store.lessons() == [] and store.job_counts() == {"queued": 0, "running": 0, "done": 0, "failed": 0}
    with Store(store_location) as again:  # a second start finds nothing to do
        assert again.schema_version() == schema_version()


def test_migrations_from_the_previous_version_keep_everything(store_location: StoreLocation) -> None:
    """A store at schema 3: on SQLite, the very file the previous release wrote; on PostgreSQL
    (new in this release), schema 3 built by the migrations and filled by the same operations."""
    if store_location.kind == "sqlite":
        store_location.path.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(store_location.path) as db:
            db.executescript(PREVIOUS_RELEASE.read_text())
    else:
        with Store(store_location, upto=3) as old:
            assert old.schema_version() == 3
            old.accept([note("a"), note("b"), note("a"), note("c")])
            old.upsert_lesson(lesson(source_incident="inc-1"))
            old.upsert_lesson(lesson(kind="slow_query"))
            job = old.claim_job(owner="h:1:x", now=1000.0, lease_s=30, max_attempts=3)
            assert job is not None
            old.finish_job(job.id, owner="h:1:x", now=datetime.now(UTC), outcome=JobOutcome(outcome="confirmed"))
            old.claim_job(owner="h:1:x", now=1000.0, lease_s=30, max_attempts=3)
    with Store(store_location) as store:
        assert store.schema_version() == schema_version()
        incidents = {i.group_key: i for i in store.incidents()}
        assert set(incidents) == {"a", "b", "c"} and incidents["a"].notifications == 2
        assert [incidents[g].investigation for g in "abc"] == ["done", "running", "queued"]
        assert store.notification_count() == 4 and len(store.lessons()) == 2
        # the old rows work with the new code: the running job's lease runs out, the queued one is next
        job = store.claim_job(owner="h:2:y", now=2000.0, lease_s=30, max_attempts=3)
        assert job is not None and job.incident_id == incidents["b"].id and job.attempts == 2
        assert store.accept([note("c")])[0].action == "updated"
        assert store.accept([note("d")])[0].action == "opened"


def test_a_store_from_a_newer_opsagent_is_refused(store_location: StoreLocation) -> None:
    Store(store_location).close()
    if store_location.kind == "sqlite":
        with sqlite3.connect(store_location.path) as db:
            db.execute(f"PRAGMA user_version = {schema_version() + 1}")
    else:
        assert store_location.password is not None
        with psycopg.connect(store_location.url, password=store_location.password.get_secret_value()) as db:
            db.execute("INSERT INTO opsagent_schema (version, name) VALUES (%s, 'future')", (schema_version() + 1,))
    with pytest.raises(StoreError) as refused:
        Store(store_location)
    assert "written by a newer opsagent" in str(refused.value)


# ---------------------------------------------------------------- where the store is


def test_the_store_url_never_holds_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    for url in ("postgresql://opsagent:hunter2@db:5432/opsagent", "postgresql://db/opsagent?password=hunter2"):
        with pytest.raises(ValueError) as refused:
            Settings(store_url=url)
        assert "OPSAGENT_STORE_PASSWORD" in str(refused.value)
    with pytest.raises(ValueError, match="sqlite:///"):
        Settings(store_url="mysql://db/opsagent")
    monkeypatch.setenv("OPSAGENT_STORE_PASSWORD", "hunter2")
    location = Settings(store_url="postgresql://opsagent@db:5432/opsagent?sslmode=require").store
    assert location.password is not None and location.password.get_secret_value() == "hunter2"
    assert "hunter2" not in str(location) and "hunter2" not in repr(location)
    assert str(location) == "postgresql://opsagent@db:5432/opsagent"


def test_the_password_is_read_from_the_environment_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from opsagent.errors import ConfigError
    from opsagent.settings import load_settings

    config = tmp_path / "opsagent.yaml"
    config.write_text("store_url: postgresql://opsagent@db/opsagent\nstore_password: hunter2\n")
    monkeypatch.setenv("OPSAGENT_CONFIG", str(config))
    with pytest.raises(ConfigError) as refused:
        load_settings()
    assert "OPSAGENT_STORE_PASSWORD" in str(refused.value) and "hunter2" not in str(refused.value)


def test_a_wrong_password_or_a_server_that_is_down_is_a_clear_store_error(store_location: StoreLocation) -> None:
    if store_location.kind == "sqlite":
        pytest.skip("a PostgreSQL server's refusals")
    wrong = store_location.model_copy(update={"password": SecretStr("not-the-password")})
    with pytest.raises(StoreError) as refused:
        Store(wrong)
    assert "password authentication failed" in str(refused.value) and "not-the-password" not in str(refused.value)
    down = StoreLocation(url="postgresql://opsagent@127.0.0.1:1/opsagent", connect_timeout_s=2)
    with pytest.raises(StoreError) as unreachable:
        asyncio.run(ServiceStore.open(down))
    assert "cannot reach the store" in str(unreachable.value) and "127.0.0.1:1" in str(unreachable.value)


def _subclasses(root: type[BaseException]) -> set[type[BaseException]]:
    found = {root}
    for sub in root.__subclasses__():
        found |= _subclasses(sub)
    return found


def test_every_psycopg_and_pool_error_is_mapped_to_a_store_error() -> None:
    """The boundary's table covers every exception class psycopg and its pool define."""
    mapped = mapped_errors()
    for module in (psycopg, psycopg.errors, psycopg_pool):
        for name in dir(module):
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, Exception) and value.__module__.startswith("psycopg"):
                # Rollback is control flow (raised to leave a transaction block), Warning not an error
                assert issubclass(value, mapped) or value.__name__ in ("Warning", "Rollback"), value
    for error in _subclasses(psycopg.Error):
        assert issubclass(error, mapped)


def test_workers_elsewhere_hear_of_a_queued_job_at_once(store_location: StoreLocation) -> None:
    """PostgreSQL announces queued jobs (LISTEN/NOTIFY): a worker on another host starts the job
    now, not at its next poll."""
    if store_location.kind == "sqlite":
        pytest.skip("SQLite's other processes poll")

    async def run() -> float:
        worker, web = await ServiceStore.open(store_location), await ServiceStore.open(store_location)
        heard = asyncio.Event()
        listening = asyncio.create_task(worker.listen(heard.set))
        try:
            await asyncio.wait_for(heard.wait(), timeout=10)  # once on (re)connecting: jobs may be waiting
            await web.accept([note("already-open")])
            await asyncio.sleep(0.3)
            heard.clear()
            await web.accept([note("already-open")])  # an update queues nothing: no announcement
            await asyncio.sleep(0.3)
            assert not heard.is_set()
            began = time.perf_counter()
            await web.accept([note("new-group")])
            await asyncio.wait_for(heard.wait(), timeout=5)
            return time.perf_counter() - began
        finally:
            listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listening
            await worker.close()
            await web.close()

    assert asyncio.run(run()) < 1.0
