-- A store written by opsagent's previous release (schema 3, store.py at c09d30c): three groups
-- (a: investigated, done; b: running; c: queued), four notifications, two lessons.
-- Made with sqlite3's iterdump; PRAGMA user_version is what that release recorded.
PRAGMA user_version = 3;
BEGIN TRANSACTION;
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
        wall_ms REAL,
        charts TEXT NOT NULL DEFAULT '[]',
        error TEXT
    , alerts_started TEXT);
INSERT INTO "incidents" VALUES('inc-b915e15949c4','a','firing','done','order-service','HighLatency','order-service slow','opsagent','2026-03-01T12:00:00+00:00','2026-03-01T12:01:00+00:00',NULL,2,'confirmed','order-service','config_change',NULL,NULL,NULL,'[]',NULL,NULL);
INSERT INTO "incidents" VALUES('inc-5be7e00a0b31','b','firing','running','order-service','HighLatency','order-service slow','opsagent','2026-03-01T12:00:00+00:00','1970-01-01T00:16:40+00:00',NULL,1,NULL,NULL,NULL,NULL,NULL,NULL,'[]',NULL,NULL);
INSERT INTO "incidents" VALUES('inc-f009fa75e1dd','c','firing','queued','order-service','HighLatency','order-service slow','opsagent','2026-03-01T12:00:00+00:00','2026-03-01T12:00:00+00:00',NULL,1,NULL,NULL,NULL,NULL,NULL,NULL,'[]',NULL,NULL);
CREATE TABLE investigations (
        incident_id TEXT PRIMARY KEY,
        created_at TEXT NOT NULL,
        status TEXT NOT NULL,
        root_component TEXT,
        root_kind TEXT,
        report TEXT NOT NULL,
        lessons_used TEXT NOT NULL DEFAULT '[]',
        feedback TEXT,
        feedback_root_cause TEXT
    );
CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        incident_id TEXT NOT NULL,
        notification_id INTEGER NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        owner TEXT,
        lease_until REAL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        error TEXT
    );
INSERT INTO "jobs" VALUES(1,'inc-b915e15949c4',1,'done',1,'h:1:x',NULL,'2026-03-01T12:00:00+00:00','2026-03-01T12:01:00+00:00',NULL);
INSERT INTO "jobs" VALUES(2,'inc-5be7e00a0b31',2,'running',1,'h:1:x',1030.0,'2026-03-01T12:00:00+00:00','1970-01-01T00:16:40+00:00',NULL);
INSERT INTO "jobs" VALUES(3,'inc-f009fa75e1dd',4,'queued',0,NULL,NULL,'2026-03-01T12:00:00+00:00','2026-03-01T12:00:00+00:00',NULL);
CREATE TABLE lessons (
        id TEXT PRIMARY KEY,
        refuted_kind TEXT NOT NULL,
        body TEXT NOT NULL,
        count INTEGER NOT NULL DEFAULT 1,
        times_retrieved INTEGER NOT NULL DEFAULT 0,
        times_helped INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    , times_misled INTEGER NOT NULL DEFAULT 0);
INSERT INTO "lessons" VALUES('L-4e8884c1','db_pool_exhaustion','{"id":"L-4e8884c1","trigger":{"symptom":"latency","condition":"timeouts in the logs","signals":["log:timeout"]},"refuting_evidence":[{"observation_id":"m-123456","value":"db_connections_used 30/200"}],"next_action":{"tool":"changes.list","args":{"service":"{service}","before_min":30}},"refuted_kind":"db_pool_exhaustion","services":["order-service"],"source_incident":"inc-1","created_at":"2026-03-01T00:00:00Z","seen_in":[],"count":1,"times_retrieved":0,"times_helped":0,"times_misled":0}',1,0,0,'2026-03-01T00:00:00+00:00','2026-12-01T18:31:43.599362+00:00',0);
INSERT INTO "lessons" VALUES('L-8f4dfc01','slow_query','{"id":"L-8f4dfc01","trigger":{"symptom":"latency","condition":"timeouts in the logs","signals":["log:timeout"]},"refuting_evidence":[{"observation_id":"m-123456","value":"db_connections_used 30/200"}],"next_action":{"tool":"changes.list","args":{"service":"{service}","before_min":30}},"refuted_kind":"slow_query","services":["order-service"],"source_incident":"inc-1","created_at":"2026-03-01T00:00:00Z","seen_in":[],"count":1,"times_retrieved":0,"times_helped":0,"times_misled":0}',1,0,0,'2026-03-01T00:00:00+00:00','2026-12-01T18:31:43.599835+00:00',0);
CREATE TABLE notifications (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        incident_id TEXT,
        group_key TEXT NOT NULL,
        status TEXT NOT NULL,
        action TEXT NOT NULL,
        received_at TEXT NOT NULL,
        payload TEXT NOT NULL
    );
INSERT INTO "notifications" VALUES(1,'inc-b915e15949c4','a','firing','opened','2026-03-01T12:00:00+00:00','{"version": "4"}');
INSERT INTO "notifications" VALUES(2,'inc-5be7e00a0b31','b','firing','opened','2026-03-01T12:00:00+00:00','{"version": "4"}');
INSERT INTO "notifications" VALUES(3,'inc-b915e15949c4','a','firing','updated','2026-03-01T12:00:00+00:00','{"version": "4"}');
INSERT INTO "notifications" VALUES(4,'inc-f009fa75e1dd','c','firing','opened','2026-03-01T12:00:00+00:00','{"version": "4"}');
CREATE UNIQUE INDEX incidents_open_group ON incidents (group_key) WHERE resolved_at IS NULL;
CREATE INDEX incidents_recent ON incidents (created_at);
CREATE INDEX incidents_service ON incidents (service, created_at);
CREATE INDEX notifications_incident ON notifications (incident_id);
CREATE INDEX jobs_pending ON jobs (status, id);
CREATE INDEX incidents_updated ON incidents (updated_at);
CREATE INDEX jobs_incident ON jobs (incident_id);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('notifications',4);
INSERT INTO "sqlite_sequence" VALUES('jobs',3);
COMMIT;
