-- Alert storms, shared by every web replica (opsagent.store.storms): one row per storm, its kept
-- alerts, services, nodes and firing alerts as one JSON document read and written whole. first_start
-- is a fixed-width UTC stamp (text order is time order), what the window is measured from; touched
-- orders storms by recency, the least recently touched deleted first beyond the cap.
CREATE TABLE storms (
    storm_key TEXT PRIMARY KEY,
    first_start TEXT NOT NULL,
    touched BIGINT NOT NULL,
    alert_count INTEGER NOT NULL,
    state TEXT NOT NULL
);
CREATE INDEX storms_first ON storms (first_start);
CREATE INDEX storms_touched ON storms (touched);
-- Which storm an alert was placed in, by fingerprint, with its start (a much later start of the same
-- fingerprint is a new firing, not this one); capped like the storms.
CREATE TABLE storm_alerts (
    fingerprint TEXT PRIMARY KEY,
    storm_key TEXT NOT NULL,
    starts_at TEXT NOT NULL,
    touched BIGINT NOT NULL
);
CREATE INDEX storm_alerts_storm ON storm_alerts (storm_key);
CREATE INDEX storm_alerts_touched ON storm_alerts (touched);
