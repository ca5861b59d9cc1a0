-- The notification outbox: a row per notification and sink, written in the transaction that changes
-- the incident's state, sent (and retried, with its attempts and next try kept here) by whichever
-- process claims it. notify_key (incident id and what changed) is the idempotency key the sink
-- receives; one row per key and sink, held by the database. thread: the Slack ts of the post, so
-- later posts about the incident go to its thread.
CREATE TABLE outbox (
    id {auto_id},
    incident_id TEXT NOT NULL,
    event TEXT NOT NULL,
    sink TEXT NOT NULL,
    notify_key TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_try DOUBLE PRECISION NOT NULL,
    owner TEXT,
    lease_until DOUBLE PRECISION,
    thread TEXT,
    error TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX outbox_once ON outbox (notify_key, sink);
CREATE INDEX outbox_due ON outbox (status, next_try);
CREATE INDEX outbox_incident ON outbox (incident_id, sink, id);
