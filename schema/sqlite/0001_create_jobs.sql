-- Level 1, base lifecycle: intake, leased claims, settle, retry, park, reap, prune.
-- Times are INTEGER unix milliseconds from the engine's Clock, never SQLite's own clock.
-- AUTOINCREMENT: a pruned max-id row's id is never handed out again (SQLite's default
-- ROWID allocator would reuse it, and an old token could then name a new job).
CREATE TABLE fenceq_jobs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    queue        TEXT    NOT NULL,
    key          TEXT,
    payload      BLOB    NOT NULL,
    state        TEXT    NOT NULL DEFAULT 'pending',
    priority     INTEGER NOT NULL DEFAULT 0,
    run_at       INTEGER NOT NULL,
    attempt      INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    worker       TEXT,
    lease_until  INTEGER,
    heartbeat_at INTEGER,
    wait_until   INTEGER,
    last_error   TEXT,
    created_at   INTEGER NOT NULL,
    settled_at   INTEGER,
    -- OR chains, not IN lists: SQLite evaluates an IN list of more than two constants
    -- through an ephemeral table built at every execution of every INSERT and UPDATE.
    CONSTRAINT state_valid CHECK (state = 'pending' OR state = 'running' OR state = 'waiting'
                                  OR state = 'completed' OR state = 'exhausted' OR state = 'unknown'
                                  OR state = 'cancelled'),
    CONSTRAINT lease_iff_running CHECK ((state = 'running') = (lease_until IS NOT NULL AND worker IS NOT NULL)),
    CONSTRAINT deadline_iff_waiting CHECK ((state = 'waiting') = (wait_until IS NOT NULL)),
    CONSTRAINT attempts_bounded CHECK (max_attempts >= 1 AND attempt >= 0 AND attempt <= max_attempts),
    CONSTRAINT pending_has_attempts_left CHECK (state <> 'pending' OR attempt < max_attempts),
    CONSTRAINT queue_named CHECK (length(queue) > 0)
);

-- Idempotent intake: one row per (queue, key) while the row exists.
CREATE UNIQUE INDEX fenceq_jobs_queue_key ON fenceq_jobs (queue, key) WHERE key IS NOT NULL;

-- Same columns and directions as the claim's WHERE + ORDER BY, so no sort step and no scan.
CREATE INDEX fenceq_jobs_claim ON fenceq_jobs (queue, priority DESC, run_at, id) WHERE state = 'pending';

-- Expired leases: found by claim (per queue) and by the reaper.
CREATE INDEX fenceq_jobs_lease ON fenceq_jobs (queue, lease_until) WHERE state = 'running';

-- Parked jobs whose deadline passes.
CREATE INDEX fenceq_jobs_wait ON fenceq_jobs (wait_until) WHERE state = 'waiting';

-- Retention of settled rows.
CREATE INDEX fenceq_jobs_settled ON fenceq_jobs (settled_at) WHERE state IN ('completed', 'cancelled');
