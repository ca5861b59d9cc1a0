-- Retention (incidents untouched for a while are pruned with their jobs); the latest start of the
-- alerts an incident has seen (a later firing of only newer alerts is a new episode); how often a
-- lesson lowered what turned out to be the cause.
CREATE INDEX incidents_updated ON incidents (updated_at);
CREATE INDEX jobs_incident ON jobs (incident_id);
ALTER TABLE incidents ADD COLUMN alerts_started TEXT;
ALTER TABLE lessons ADD COLUMN times_misled INTEGER NOT NULL DEFAULT 0;
