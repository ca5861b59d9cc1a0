-- The webhook service. One incident per open alert group (groupKey); every accepted notification is
-- kept; a job per incident to investigate, leased by the process running it.
-- lease_until is seconds since the epoch: DOUBLE PRECISION (PostgreSQL's REAL is 4 bytes, too
-- coarse for it; SQLite gives both the same REAL affinity).
CREATE TABLE incidents (
    id TEXT PRIMARY KEY,
    group_key TEXT NOT NULL,
    state TEXT NOT NULL,
    investigation TEXT NOT NULL,
    service TEXT NOT NULL,
    alertname TEXT NOT NULL,
    title TEXT NOT NULL,
    receiver TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    resolved_at TEXT,
    notifications INTEGER NOT NULL DEFAULT 1,
    outcome TEXT,
    root_component TEXT,
    root_kind TEXT,
    summary TEXT,
    source TEXT,
    wall_ms DOUBLE PRECISION,
    charts TEXT NOT NULL DEFAULT '[]',
    error TEXT
);
-- the dedup rule, held by the database: at most one open incident per alert group
CREATE UNIQUE INDEX incidents_open_group ON incidents (group_key) WHERE resolved_at IS NULL;
CREATE INDEX incidents_recent ON incidents (created_at);
CREATE INDEX incidents_service ON incidents (service, created_at);
CREATE TABLE notifications (
    id {auto_id},
    incident_id TEXT,
    group_key TEXT NOT NULL,
    status TEXT NOT NULL,
    action TEXT NOT NULL,
    received_at TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX notifications_incident ON notifications (incident_id);
CREATE TABLE jobs (
    id {auto_id},
    incident_id TEXT NOT NULL,
    notification_id BIGINT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    owner TEXT,
    lease_until DOUBLE PRECISION,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    error TEXT
);
CREATE INDEX jobs_pending ON jobs (status, id);
