-- Ids without AUTOINCREMENT: a pruned id is still never handed out again, at the price of a
-- read instead of a write per insert.
--
-- AUTOINCREMENT kept that promise by updating the table's row of `sqlite_sequence` in every
-- transaction that inserted a job: one more page written to the WAL at each commit, which a
-- lone caller's enqueue pays in full (see docs/performance.md, "Ids without AUTOINCREMENT").
-- Without it SQLite gives a new row the largest id in the table plus one, so only a pruned
-- newest row could see its id again. `fenceq_id_floor` closes that: prune records the largest
-- id it deleted, and an insert takes the floor plus one when the floor is above every id the
-- table still holds (the id expression of `ENQUEUE` and its kin: two index lookups, no write).
--
-- SQLite cannot drop AUTOINCREMENT from a table, hence the copy, as in 0007: new table with the
-- same columns in the same order, the same CHECKs under the same names, rows copied by column
-- name, old table dropped (its indexes and its `sqlite_sequence` row go with it), the new one
-- renamed, the indexes created again. The floor starts at the old sequence, so an id handed out
-- before the upgrade (and pruned since) is never handed out again.
CREATE TABLE fenceq_id_floor (
    only  INTEGER PRIMARY KEY CHECK (only = 1),
    floor INTEGER NOT NULL CHECK (floor >= 0)
);
INSERT INTO fenceq_id_floor (only, floor)
SELECT 1, max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'fenceq_jobs'), 0),
              coalesce((SELECT max(id) FROM fenceq_jobs), 0));

CREATE TABLE fenceq_jobs_rebuilt (
    id              INTEGER PRIMARY KEY,
    queue           TEXT    NOT NULL,
    key             TEXT,
    payload         BLOB    NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'pending',
    priority        INTEGER NOT NULL DEFAULT 0,
    run_at          INTEGER NOT NULL,
    attempt         INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL,
    worker          TEXT,
    lease_until     INTEGER,
    heartbeat_at    INTEGER,
    wait_until      INTEGER,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    settled_at      INTEGER,
    claim_id        BLOB,
    exhausted_at    INTEGER,
    acknowledged_at INTEGER,
    decision        TEXT,
    decided_at      INTEGER,
    decided_by      TEXT,
    decision_note   TEXT,
    group_name      TEXT
        CONSTRAINT group_named CHECK (group_name IS NULL OR length(group_name) > 0),
    group_held      INTEGER NOT NULL DEFAULT 0
        CONSTRAINT held_only_pending_in_group CHECK (group_held = 0
                                                     OR (group_held = 1 AND state = 'pending' AND group_name IS NOT NULL)),
    snoozes         INTEGER NOT NULL DEFAULT 0
        CONSTRAINT snoozes_counted CHECK (snoozes >= 0),
    -- OR chains, not IN lists (see 0001).
    CONSTRAINT state_valid CHECK (state = 'pending' OR state = 'running' OR state = 'waiting'
                                  OR state = 'completed' OR state = 'exhausted' OR state = 'unknown'
                                  OR state = 'cancelled'),
    CONSTRAINT lease_iff_running CHECK ((state = 'running') = (lease_until IS NOT NULL AND worker IS NOT NULL)),
    CONSTRAINT deadline_iff_waiting CHECK ((state = 'waiting') = (wait_until IS NOT NULL)),
    CONSTRAINT attempts_bounded CHECK (max_attempts >= 1 AND attempt >= 0 AND attempt <= max_attempts),
    CONSTRAINT pending_has_attempts_left CHECK (state <> 'pending' OR attempt < max_attempts),
    CONSTRAINT queue_named CHECK (length(queue) > 0),
    CONSTRAINT claimed_has_claim_id CHECK (claim_id IS NOT NULL
                                           OR NOT (state = 'running' OR state = 'waiting'
                                                   OR state = 'exhausted' OR state = 'unknown'))
);

INSERT INTO fenceq_jobs_rebuilt (
    id, queue, key, payload, state, priority, run_at, attempt, max_attempts, worker, lease_until,
    heartbeat_at, wait_until, last_error, created_at, settled_at, claim_id, exhausted_at,
    acknowledged_at, decision, decided_at, decided_by, decision_note, group_name, group_held,
    snoozes)
SELECT id, queue, key, payload, state, priority, run_at, attempt, max_attempts, worker, lease_until,
       heartbeat_at, wait_until, last_error, created_at, settled_at, claim_id, exhausted_at,
       acknowledged_at, decision, decided_at, decided_by, decision_note, group_name, group_held,
       snoozes
FROM   fenceq_jobs
ORDER  BY id;

DROP TABLE fenceq_jobs;
DELETE FROM sqlite_sequence WHERE name = 'fenceq_jobs';
ALTER TABLE fenceq_jobs_rebuilt RENAME TO fenceq_jobs;

-- The indexes as 0007 and 0008 left them, unchanged.
CREATE UNIQUE INDEX fenceq_jobs_queue_key ON fenceq_jobs (queue, key) WHERE key IS NOT NULL;
CREATE INDEX fenceq_jobs_lease ON fenceq_jobs (queue, lease_until) WHERE state = 'running';
CREATE INDEX fenceq_jobs_wait ON fenceq_jobs (wait_until) WHERE state = 'waiting';
CREATE INDEX fenceq_jobs_settled ON fenceq_jobs (settled_at) WHERE state IN ('completed', 'cancelled');
CREATE INDEX fenceq_jobs_exhausted ON fenceq_jobs (id) WHERE state = 'exhausted' AND acknowledged_at IS NULL;
CREATE INDEX fenceq_jobs_unknown ON fenceq_jobs (id) WHERE state = 'unknown';
CREATE INDEX fenceq_jobs_acknowledged ON fenceq_jobs (acknowledged_at) WHERE state = 'exhausted' AND acknowledged_at IS NOT NULL;
CREATE INDEX fenceq_jobs_claim ON fenceq_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'pending' AND group_held = 0;
CREATE INDEX fenceq_jobs_group ON fenceq_jobs (queue, group_name, group_held, id)
    WHERE group_name IS NOT NULL
      AND (state = 'pending' OR state = 'running' OR state = 'waiting' OR state = 'unknown'
           OR state = 'exhausted');
