-- What the CLI keeps: lessons (structured, deduplicated by id) and the investigations they came from.
CREATE TABLE lessons (
    id TEXT PRIMARY KEY,
    refuted_kind TEXT NOT NULL,
    body TEXT NOT NULL,
    count INTEGER NOT NULL DEFAULT 1,
    times_retrieved INTEGER NOT NULL DEFAULT 0,
    times_helped INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
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
