-- Level 1, base lifecycle: intake, leased claims, settle, retry, park, reap, prune.
-- The same columns and rules as SQLite's 0001. Times are BIGINT unix milliseconds from the
-- queue's Clock (see the store's docs on time), never the server's own clock.
-- An identity column draws from a sequence: a pruned max-id row's id is never handed out
-- again (an old token could otherwise name a new job).
CREATE TABLE fenceq_jobs (
    id           BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue        TEXT    NOT NULL,
    key          TEXT,
    payload      BYTEA   NOT NULL,
    state        TEXT    NOT NULL DEFAULT 'pending',
    priority     INTEGER NOT NULL DEFAULT 0,
    run_at       BIGINT  NOT NULL,
    attempt      INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    worker       TEXT,
    lease_until  BIGINT,
    heartbeat_at BIGINT,
    wait_until   BIGINT,
    last_error   TEXT,
    created_at   BIGINT  NOT NULL,
    settled_at   BIGINT,
    CONSTRAINT state_valid CHECK (state IN ('pending', 'running', 'waiting', 'completed', 'exhausted',
                                            'unknown', 'cancelled')),
    CONSTRAINT lease_iff_running CHECK ((state = 'running') = (lease_until IS NOT NULL AND worker IS NOT NULL)),
    CONSTRAINT deadline_iff_waiting CHECK ((state = 'waiting') = (wait_until IS NOT NULL)),
    CONSTRAINT attempts_bounded CHECK (max_attempts >= 1 AND attempt >= 0 AND attempt <= max_attempts),
    CONSTRAINT pending_has_attempts_left CHECK (state <> 'pending' OR attempt < max_attempts),
    CONSTRAINT queue_named CHECK (length(queue) > 0)
);

-- Idempotent intake: one row per (queue, key) while the row exists (`ON CONFLICT DO NOTHING`
-- names this index's columns and predicate).
CREATE UNIQUE INDEX fenceq_jobs_queue_key ON fenceq_jobs (queue, key) WHERE key IS NOT NULL;

-- Same columns and directions as the claim's ORDER BY for pending rows.
CREATE INDEX fenceq_jobs_claim ON fenceq_jobs (queue, priority DESC, run_at, id) WHERE state = 'pending';

-- Expired leases: found by claim (per queue) and by the reaper.
CREATE INDEX fenceq_jobs_lease ON fenceq_jobs (queue, lease_until) WHERE state = 'running';

-- Parked jobs whose deadline passes.
CREATE INDEX fenceq_jobs_wait ON fenceq_jobs (wait_until) WHERE state = 'waiting';

-- Retention of settled rows.
CREATE INDEX fenceq_jobs_settled ON fenceq_jobs (settled_at) WHERE state IN ('completed', 'cancelled');
