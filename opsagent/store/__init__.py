"""opsagent's store: lessons, investigation records, and the webhook service's incidents,
notifications and durable job queue.

Two backends, chosen by one setting (``store_url``): a SQLite file under the data directory (the
embedded default) and a PostgreSQL server that several service replicas and worker hosts share.

    Store              the store for callers without an event loop (CLI, worker processes, tests)
    ServiceStore       the store the service awaits (PostgreSQL: an async pool; SQLite: threads)
    StoreLocation      where it is: a file or a server, the password from the environment only
    StoreError         anything that went wrong, naming the store (never its password)

    records            the rows, as pydantic models
    sql                the transaction protocol the operations are written against, once for both
    lessons, investigations, inbox, jobs, incidents      the operations, by concern
    migrations         one set of versioned SQL files for both databases
    sqlite, postgres   the backends: connections, transactions, their errors mapped to StoreError

Nothing is written unredacted: reports, lessons, notification payloads and error texts pass
through :mod:`opsagent.redaction` on their way in, so no reader of the store (or of an API that
serves it) sees a secret a report would not show.
"""

from opsagent.store.blocking import Store
from opsagent.store.errors import StoreError
from opsagent.store.location import STORE_PASSWORD_ENV, StoreLocation
from opsagent.store.migrations import latest as schema_version
from opsagent.store.records import (
    Accepted,
    ClaimedJob,
    FinishedReport,
    IncidentRecord,
    IncidentState,
    InvestigationRecord,
    InvestigationState,
    JobOutcome,
    NotificationIn,
)
from opsagent.store.service import ServiceStore

__all__ = [
    "STORE_PASSWORD_ENV",
    "Accepted",
    "ClaimedJob",
    "FinishedReport",
    "IncidentRecord",
    "IncidentState",
    "InvestigationRecord",
    "InvestigationState",
    "JobOutcome",
    "NotificationIn",
    "ServiceStore",
    "Store",
    "StoreError",
    "StoreLocation",
    "schema_version",
]
