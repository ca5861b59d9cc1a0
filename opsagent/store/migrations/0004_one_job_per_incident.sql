-- Several replicas share one store: an incident is investigated by one job, whichever replica
-- accepted it, held by the database rather than by the code that inserts jobs.
DROP INDEX jobs_incident;
CREATE UNIQUE INDEX jobs_one_per_incident ON jobs (incident_id);
