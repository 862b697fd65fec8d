-- The rules on a row, all in the table's own CHECKs: the table is rebuilt once so that the
-- claim-id rule of 0002 becomes a CHECK (`claimed_has_claim_id`) instead of two triggers.
-- Same rule, same columns, same indexes, same AUTOINCREMENT sequence; measured cheaper: with
-- the triggers, every insert and every update of `state` or `claim_id` ran a trigger
-- program (about 7,000 of the 37,000 instructions of one insert, and 7,000 of the 32,000
-- of one completion; `fenceq bench`'s guard figures in the README). SQLite cannot add a
-- CHECK to an existing table, hence the copy: new table, rows copied by column name, old
-- table dropped (its triggers and indexes go with it), the new one renamed, the indexes
-- created again. The sequence of ids is carried over, so that an id handed out before the
-- upgrade (and pruned since) is never handed out again.
CREATE TABLE fenceq_jobs_rebuilt (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
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
    -- OR chains, not IN lists (see 0001).
    CONSTRAINT state_valid CHECK (state = 'pending' OR state = 'running' OR state = 'waiting'
                                  OR state = 'completed' OR state = 'exhausted' OR state = 'unknown'
                                  OR state = 'cancelled'),
    CONSTRAINT lease_iff_running CHECK ((state = 'running') = (lease_until IS NOT NULL AND worker IS NOT NULL)),
    CONSTRAINT deadline_iff_waiting CHECK ((state = 'waiting') = (wait_until IS NOT NULL)),
    CONSTRAINT attempts_bounded CHECK (max_attempts >= 1 AND attempt >= 0 AND attempt <= max_attempts),
    CONSTRAINT pending_has_attempts_left CHECK (state <> 'pending' OR attempt < max_attempts),
    CONSTRAINT queue_named CHECK (length(queue) > 0),
    -- A claimed (or claim-keeping) row always carries its claim id (was two triggers, 0002).
    CONSTRAINT claimed_has_claim_id CHECK (claim_id IS NOT NULL
                                           OR NOT (state = 'running' OR state = 'waiting'
                                                   OR state = 'exhausted' OR state = 'unknown'))
);

INSERT INTO fenceq_jobs_rebuilt (
    id, queue, key, payload, state, priority, run_at, attempt, max_attempts, worker, lease_until,
    heartbeat_at, wait_until, last_error, created_at, settled_at, claim_id, exhausted_at,
    acknowledged_at, decision, decided_at, decided_by, decision_note)
SELECT id, queue, key, payload, state, priority, run_at, attempt, max_attempts, worker, lease_until,
       heartbeat_at, wait_until, last_error, created_at, settled_at, claim_id, exhausted_at,
       acknowledged_at, decision, decided_at, decided_by, decision_note
FROM   fenceq_jobs
ORDER  BY id;

-- The copy's sequence is its largest id; the old one may be larger (its largest rows pruned).
DELETE FROM sqlite_sequence WHERE name = 'fenceq_jobs_rebuilt';
INSERT INTO sqlite_sequence (name, seq)
SELECT 'fenceq_jobs_rebuilt', max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'fenceq_jobs'), 0),
                                  coalesce((SELECT max(id) FROM fenceq_jobs_rebuilt), 0));

DROP TABLE fenceq_jobs;
ALTER TABLE fenceq_jobs_rebuilt RENAME TO fenceq_jobs;

-- The indexes of 0001 and 0003, unchanged.
CREATE UNIQUE INDEX fenceq_jobs_queue_key ON fenceq_jobs (queue, key) WHERE key IS NOT NULL;
CREATE INDEX fenceq_jobs_claim ON fenceq_jobs (queue, priority DESC, run_at, id) WHERE state = 'pending';
CREATE INDEX fenceq_jobs_lease ON fenceq_jobs (queue, lease_until) WHERE state = 'running';
CREATE INDEX fenceq_jobs_wait ON fenceq_jobs (wait_until) WHERE state = 'waiting';
CREATE INDEX fenceq_jobs_settled ON fenceq_jobs (settled_at) WHERE state IN ('completed', 'cancelled');
CREATE INDEX fenceq_jobs_exhausted ON fenceq_jobs (id) WHERE state = 'exhausted' AND acknowledged_at IS NULL;
CREATE INDEX fenceq_jobs_unknown ON fenceq_jobs (id) WHERE state = 'unknown';
CREATE INDEX fenceq_jobs_acknowledged ON fenceq_jobs (acknowledged_at) WHERE state = 'exhausted' AND acknowledged_at IS NOT NULL;
