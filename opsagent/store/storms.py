"""Alert storms kept in the store, so that every web replica correlates against the same storms.

The webhook accepts a notification in one transaction (:func:`deliver`): with correlation on, it
first takes one lock that every correlating writer takes (PostgreSQL: a transaction-level advisory
lock; SQLite's write transaction already holds the file), reads the storms the notification's alerts
may belong to (those whose first alert lies within the window of theirs, those named by their
fingerprints, and those keyed by their alert group), seeds a fresh
:class:`~opsagent.correlation.Correlator` with them, lets the notification be split by storm,
writes back what changed, and stores the parts (:func:`opsagent.store.inbox.accept`) before the
lock is released. Two replicas receiving a storm's alerts at the same moment so take turns, and the
second finds the storm the first opened: one incident.

State is bounded as the correlator's own is: at most ``max_storms`` rows in ``storms`` (the least
recently touched is deleted first, with its fingerprints) and at most ``max_storms × max_members``
in ``storm_alerts``. A storm's row holds its kept members, services, nodes and firing alerts as
one JSON document (:class:`StormState`, the alerts' texts redacted as notification payloads are);
it is read and written whole, never queried inside.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from opsagent.correlation import Correlator, Storm
from opsagent.models import Alert, JoinedAlert
from opsagent.redaction import Redactor, redactors, scrub_model
from opsagent.store import inbox
from opsagent.store.inbox import group_lock
from opsagent.store.records import Accepted, NotificationIn, instant
from opsagent.store.sql import Tx, marks

#: The lock every correlating writer takes before it reads storms (any constant both sides agree on).
STORMS_LOCK = group_lock("opsagent:alert-storms")
#: Values per ``IN (…)``: well under SQLite's and PostgreSQL's limits on bound parameters.
CHUNK = 500

#: Splits one notification into the notifications the inbox stores, given the correlator holding the
#: storms its alerts may belong to (None when correlation is off).
Split = Callable[[Correlator | None], list[NotificationIn]]


@dataclass(frozen=True)
class Delivery:
    """One notification as the accept transaction takes it: its alerts (what the correlator reads
    storms for), the storm keys it may open, and how it splits."""

    split: Split
    alerts: tuple[Alert, ...] = ()
    keys: tuple[str, ...] = ()

    @classmethod
    def plain(cls, notification: NotificationIn) -> Delivery:
        """A notification stored as it is, correlated with nothing."""
        return cls(split=lambda _: [notification])


class StormState(BaseModel):
    """A storm's row, besides its key, first start and count: what it keeps of its alerts."""

    model_config = ConfigDict(extra="forbid")

    members: list[JoinedAlert]
    services: list[str]
    nodes: list[str]
    keys: list[str]
    firing: list[str]
    scope: dict[str, str] = {}


@dataclass(frozen=True)
class StormRow:
    """A storm as the store holds it, for readers (tests, operators)."""

    storm: Storm
    touched: int


async def deliver(
    tx: Tx,
    deliveries: Sequence[Delivery],
    correlator: Callable[[], Correlator] | None,
    sinks: Sequence[str] = (),
) -> list[list[Accepted]]:
    """Accept ``deliveries`` in this transaction, in order: each split by storm when ``correlator``
    (a factory of empty correlators) is given, the storms read and written under the storms lock.
    What each delivery's notifications did, per delivery."""
    if correlator is not None and any(d.alerts for d in deliveries):
        await tx.lock([STORMS_LOCK])
        held = correlator()
        await _load(tx, held, [a for d in deliveries for a in d.alerts], [k for d in deliveries for k in d.keys])
        notes = [d.split(held) for d in deliveries]
        await _save(tx, held)
    else:
        notes = [d.split(None) for d in deliveries]
    accepted = await inbox.accept(tx, [n for ns in notes for n in ns], sinks)
    out, at = [], 0
    for ns in notes:
        out.append(accepted[at : at + len(ns)])
        at += len(ns)
    return out


async def _load(tx: Tx, correlator: Correlator, alerts: Sequence[Alert], keys: Sequence[str]) -> None:
    """Seed ``correlator`` with every stored storm these alerts could be placed in or settle."""
    fingerprints = sorted({a.fingerprint for a in alerts if a.fingerprint})
    index: dict[str, list[tuple[str, datetime]]] = {}
    for chunk in _chunks(fingerprints):
        found = await tx.execute(
            f"SELECT fingerprint, storm_key, starts_at FROM storm_alerts WHERE fingerprint IN ({marks(len(chunk))})",
            chunk,
        )
        for fingerprint, key, start in found.rows:
            index.setdefault(key, []).append((fingerprint, datetime.fromisoformat(start)))
    placed = {f: start for entries in index.values() for f, start in entries}
    # alerts placed before (a re-notification, Alertmanager's usual) go back to their storm by
    # fingerprint: only a batch with an alert new to the storms needs every storm of its window
    new = [a for a in alerts if not a.fingerprint or a.fingerprint not in placed or not _near(a, placed, correlator)]
    rows = []
    if new:
        starts = [a.starts_at for a in new]
        low, high = instant(min(starts) - correlator.window), instant(max(starts) + correlator.window)
        found = await tx.execute(
            "SELECT storm_key, first_start, alert_count, state, touched FROM storms"
            " WHERE first_start >= ? AND first_start <= ?",
            [low, high],
        )
        rows += found.rows
    named = sorted({*keys, *index} - {r[0] for r in rows})
    for chunk in _chunks(named):
        found = await tx.execute(
            "SELECT storm_key, first_start, alert_count, state, touched FROM storms"
            f" WHERE storm_key IN ({marks(len(chunk))})",
            chunk,
        )
        rows += found.rows
    for row in sorted(rows, key=lambda r: (r[4], r[0])):  # least recently touched first, as the correlator orders
        correlator.remember(_storm(row), index.get(row[0], ()))


def _near(alert: Alert, placed: dict[str, datetime], correlator: Correlator) -> bool:
    """Whether ``alert`` is the one its fingerprint was placed as (a start within the window)."""
    return alert.fingerprint is not None and abs(alert.starts_at - placed[alert.fingerprint]) <= correlator.window


async def _save(tx: Tx, correlator: Correlator) -> None:
    """Write back what placing the alerts changed, then hold the table to the correlator's caps."""
    changes = correlator.changes
    gone = sorted(changes.forgotten)
    for chunk in _chunks(gone):
        await tx.execute(f"DELETE FROM storms WHERE storm_key IN ({marks(len(chunk))})", chunk)
        await tx.execute(f"DELETE FROM storm_alerts WHERE storm_key IN ({marks(len(chunk))})", chunk)
    kept = {s.key: s for s in correlator.storms}
    touched = [kept[k] for k in changes.storms if k in kept]
    if touched:
        chain = redactors()
        base = await _latest(tx, "storms")
        await tx.executemany(
            "INSERT INTO storms (storm_key, first_start, touched, alert_count, state) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (storm_key) DO UPDATE SET first_start = excluded.first_start,"
            " touched = excluded.touched, alert_count = excluded.alert_count, state = excluded.state",
            [(s.key, instant(s.first), base + i, s.count, _state(s, chain)) for i, s in enumerate(touched, 1)],
        )
    indexed = [(f, k, start) for f, (k, start) in changes.fingerprints.items() if k in kept]
    if indexed:
        base = await _latest(tx, "storm_alerts")
        await tx.executemany(
            "INSERT INTO storm_alerts (fingerprint, storm_key, starts_at, touched) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (fingerprint) DO UPDATE SET storm_key = excluded.storm_key,"
            " starts_at = excluded.starts_at, touched = excluded.touched",
            [(f, k, instant(start), base + i) for i, (f, k, start) in enumerate(indexed, 1)],
        )
    await _cap(tx, max_storms=correlator.max_storms, max_fingerprints=correlator.max_storms * correlator.max_members)


async def _cap(tx: Tx, *, max_storms: int, max_fingerprints: int) -> None:
    over = await _count(tx, "storms") - max_storms
    if over > 0:
        found = await tx.execute("SELECT storm_key FROM storms ORDER BY touched, storm_key LIMIT ?", [over])
        victims = [r[0] for r in found.rows]
        for chunk in _chunks(victims):
            await tx.execute(f"DELETE FROM storms WHERE storm_key IN ({marks(len(chunk))})", chunk)
            await tx.execute(f"DELETE FROM storm_alerts WHERE storm_key IN ({marks(len(chunk))})", chunk)
    over = await _count(tx, "storm_alerts") - max_fingerprints
    if over > 0:
        await tx.execute(
            "DELETE FROM storm_alerts WHERE fingerprint IN"
            " (SELECT fingerprint FROM storm_alerts ORDER BY touched, fingerprint LIMIT ?)",
            [over],
        )


async def held(tx: Tx) -> list[StormRow]:
    """Every storm the store holds, least recently touched first."""
    found = await tx.execute("SELECT storm_key, first_start, alert_count, state, touched FROM storms")
    return [StormRow(storm=_storm(r), touched=int(r[4])) for r in sorted(found.rows, key=lambda r: (r[4], r[0]))]


async def fingerprints_held(tx: Tx) -> int:
    return await _count(tx, "storm_alerts")


def _storm(row: tuple[object, ...]) -> Storm:
    key, first, count, state = row[0], row[1], row[2], row[3]
    kept = StormState.model_validate_json(str(state))
    return Storm(
        key=str(key),
        first=datetime.fromisoformat(str(first)),
        members=kept.members,
        services=kept.services,
        nodes=kept.nodes,
        keys=kept.keys,
        firing=set(kept.firing),
        scope=kept.scope,
        count=int(str(count)),
    )


def _state(storm: Storm, chain: Sequence[Redactor]) -> str:
    """The row's document; the alerts' texts redacted, as every notification payload is stored."""
    return StormState(
        members=[scrub_model(m, chain) for m in storm.members],
        services=storm.services,
        nodes=storm.nodes,
        keys=storm.keys,
        firing=sorted(storm.firing),
        scope=storm.scope,
    ).model_dump_json()


async def _latest(tx: Tx, table: str) -> int:
    found = (await tx.execute(f"SELECT COALESCE(MAX(touched), 0) FROM {table}")).one()
    return int(found[0]) if found is not None else 0


async def _count(tx: Tx, table: str) -> int:
    found = (await tx.execute(f"SELECT COUNT(*) FROM {table}")).one()
    return int(found[0]) if found is not None else 0


def _chunks(values: Sequence[str]) -> Iterable[list[str]]:
    for at in range(0, len(values), CHUNK):
        yield list(values[at : at + CHUNK])
