-- Flow control, as SQLite's 0008: groups (one job of a (queue, group) at a time, in enqueue
-- order) and back-off that spends no attempt.
--
-- A grouped job that may not start yet because an earlier job of its group still holds the
-- group is `pending` with `group_held`. The claim's partial index leaves held jobs out, so the
-- claim reads only claimable rows however long a blocked group's backlog is; the transitions
-- that end a head's hold clear `group_held` of the group's next job. Nothing changes for a job
-- without a group.
ALTER TABLE fenceq_jobs ADD COLUMN group_name TEXT
    CONSTRAINT group_named CHECK (group_name IS NULL OR length(group_name) > 0);
ALTER TABLE fenceq_jobs ADD COLUMN group_held BOOLEAN NOT NULL DEFAULT false
    CONSTRAINT held_only_pending_in_group CHECK (NOT group_held
                                                 OR (state = 'pending' AND group_name IS NOT NULL));
-- Set, in the same statement, by a transition that may end the job's hold on its group (a
-- settle, an operator's decision); cleared by the release that hands the group on, which runs
-- right after in a transaction of its own when the settle ran in autocommit. A release lost
-- between the two (a crash, a lost connection) is found here by the reaper and done then, so
-- a group is never left held by nobody.
ALTER TABLE fenceq_jobs ADD COLUMN group_release_due BOOLEAN NOT NULL DEFAULT false;
-- How often the job was put back without spending an attempt; capped per job by the pool.
ALTER TABLE fenceq_jobs ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0
    CONSTRAINT snoozes_counted CHECK (snoozes >= 0);

DROP INDEX fenceq_jobs_claim;
CREATE INDEX fenceq_jobs_claim ON fenceq_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'pending' AND NOT group_held;

-- A group's live jobs: its holder (`NOT group_held`) and its held backlog in id order.
CREATE INDEX fenceq_jobs_group ON fenceq_jobs (queue, group_name, group_held, id)
    WHERE group_name IS NOT NULL
      AND state IN ('pending', 'running', 'waiting', 'unknown', 'exhausted');

CREATE INDEX fenceq_jobs_group_release_due ON fenceq_jobs (queue, group_name) WHERE group_release_due;

-- One row per (queue, group) that ever had a job: the lock that serialises the decisions about
-- who holds the group (a grouped enqueue, and the release after a head's hold ends) across
-- transactions and processes. The claim never takes it. Updated in place (`touched_at`, no
-- index on it), so a fillfactor leaves room for heap-only updates.
CREATE TABLE fenceq_groups (
    queue      TEXT   NOT NULL,
    group_name TEXT   NOT NULL,
    touched_at BIGINT NOT NULL,
    PRIMARY KEY (queue, group_name)
) WITH (fillfactor = 50);

-- Per-queue flow control (see SQLite's 0008): the group policy and a queue-wide back-off.
CREATE TABLE fenceq_queue_flow (
    queue          TEXT   NOT NULL PRIMARY KEY,
    group_policy   TEXT   NOT NULL DEFAULT 'stop',
    backoff_until  BIGINT,
    backoff_reason TEXT,
    -- When the back-off was last set (see SQLite's 0008).
    backoff_since  BIGINT,
    updated_at     BIGINT NOT NULL,
    -- How many rows of `fenceq_starts` the queue has (see SQLite's 0008).
    starts_kept    BIGINT NOT NULL DEFAULT 0,
    CONSTRAINT queue_named CHECK (length(queue) > 0),
    CONSTRAINT group_policy_valid CHECK (group_policy = 'stop' OR group_policy = 'continue'),
    CONSTRAINT backoff_has_reason CHECK ((backoff_until IS NULL) = (backoff_reason IS NULL)),
    CONSTRAINT backoff_has_since CHECK ((backoff_until IS NULL) = (backoff_since IS NULL))
);

-- Rate and concurrency limits of a queue (see SQLite's 0008). A claim of a queue with limits
-- runs in a transaction that first locks the queue's `fenceq_queue_flow` row, so that two
-- claims never count the same window at once.
CREATE TABLE fenceq_limits (
    queue      TEXT    NOT NULL,
    scope      TEXT    NOT NULL,
    window_ms  BIGINT  NOT NULL,
    max_count  INTEGER NOT NULL,
    updated_at BIGINT  NOT NULL,
    PRIMARY KEY (queue, scope, window_ms),
    CONSTRAINT queue_named CHECK (length(queue) > 0),
    CONSTRAINT scope_valid CHECK (scope IN ('rate', 'group_rate', 'running')),
    CONSTRAINT window_fits_scope CHECK ((scope = 'running') = (window_ms = 0)),
    CONSTRAINT window_bounded CHECK (window_ms >= 0 AND window_ms <= 86400000),
    CONSTRAINT count_bounded CHECK (max_count >= 1 AND max_count <= 1000000)
);

-- When each attempt of a rate-limited queue started (its claim), by the server's clock.
CREATE TABLE fenceq_starts (
    queue      TEXT   NOT NULL,
    group_name TEXT,
    at         BIGINT NOT NULL,
    job_id     BIGINT NOT NULL
);
CREATE INDEX fenceq_starts_queue ON fenceq_starts (queue, at);
CREATE INDEX fenceq_starts_group ON fenceq_starts (queue, group_name, at) WHERE group_name IS NOT NULL;
