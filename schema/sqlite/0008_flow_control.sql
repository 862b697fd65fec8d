-- Flow control: groups (one job of a (queue, group) at a time, in enqueue order) and back-off
-- that spends no attempt.
--
-- A grouped job that may not start yet because an earlier job of its group still holds the
-- group is `pending` with `group_held = 1`. The claim's partial index leaves held jobs out, so
-- the claim reads only claimable rows however long a blocked group's backlog is; the
-- transitions that end a head's hold (complete, cancel, acknowledge, resolve, and for a queue
-- whose policy is `continue`, exhaust and unknown) clear `group_held` of the group's next job.
-- Nothing changes for a job without a group: `group_name` is NULL and `group_held` 0.
ALTER TABLE fenceq_jobs ADD COLUMN group_name TEXT
    CONSTRAINT group_named CHECK (group_name IS NULL OR length(group_name) > 0);
ALTER TABLE fenceq_jobs ADD COLUMN group_held INTEGER NOT NULL DEFAULT 0
    CONSTRAINT held_only_pending_in_group CHECK (group_held = 0
                                                 OR (group_held = 1 AND state = 'pending' AND group_name IS NOT NULL));
-- How often the job was put back without spending an attempt (a snooze, or a retry-after
-- a provider's 429); capped per job by the pool.
ALTER TABLE fenceq_jobs ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0
    CONSTRAINT snoozes_counted CHECK (snoozes >= 0);

DROP INDEX fenceq_jobs_claim;
CREATE INDEX fenceq_jobs_claim ON fenceq_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'pending' AND group_held = 0;

-- A group's live jobs: its holder (`group_held = 0`, at most one per group outside a
-- transition) and its held backlog in id order. Settled jobs leave it, so a group's history
-- never lengthens the probes. (The OR chain is written the same way in the statements that
-- use it: SQLite uses a partial index only when the query repeats the index's terms.)
CREATE INDEX fenceq_jobs_group ON fenceq_jobs (queue, group_name, group_held, id)
    WHERE group_name IS NOT NULL
      AND (state = 'pending' OR state = 'running' OR state = 'waiting' OR state = 'unknown'
           OR state = 'exhausted');

-- Per-queue flow control, one row per queue that has any (as `fenceq_queues` for pauses):
-- the group policy (`stop`: a failed head, `unknown` or exhausted and unacknowledged, blocks
-- its group until a person decides; `continue`: it no longer does) and a queue-wide back-off
-- (a provider's "retry after" for the whole queue: no claim of the queue before
-- `backoff_until`, in any process). WITHOUT ROWID: the claim's probe is one primary-key lookup.
CREATE TABLE fenceq_queue_flow (
    queue          TEXT    NOT NULL PRIMARY KEY,
    group_policy   TEXT    NOT NULL DEFAULT 'stop',
    backoff_until  INTEGER,
    backoff_reason TEXT,
    -- When the back-off was last set: a column of its own, as `updated_at` moves with every
    -- write of the row (the group policy, a limit's touch).
    backoff_since  INTEGER,
    updated_at     INTEGER NOT NULL,
    -- How many rows of `fenceq_starts` the queue has (kept by the claims that write and
    -- delete them): while it leaves room under a rate's count, no window of the rate can be
    -- full, and the claim need not count one.
    starts_kept    INTEGER NOT NULL DEFAULT 0,
    CONSTRAINT queue_named CHECK (length(queue) > 0),
    CONSTRAINT group_policy_valid CHECK (group_policy = 'stop' OR group_policy = 'continue'),
    CONSTRAINT backoff_has_reason CHECK ((backoff_until IS NULL) = (backoff_reason IS NULL)),
    CONSTRAINT backoff_has_since CHECK ((backoff_until IS NULL) = (backoff_since IS NULL))
) WITHOUT ROWID;

-- Rate and concurrency limits of a queue, stored so that every process and handle obeys the
-- same ones: `rate` (at most `max_count` claims of the queue in any window of `window_ms`),
-- `group_rate` (the same per group; several windows may be set, all hold) and `running` (at
-- most `max_count` running attempts of the queue; `window_ms` 0).
CREATE TABLE fenceq_limits (
    queue      TEXT    NOT NULL,
    scope      TEXT    NOT NULL,
    window_ms  INTEGER NOT NULL,
    max_count  INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (queue, scope, window_ms),
    CONSTRAINT queue_named CHECK (length(queue) > 0),
    CONSTRAINT scope_valid CHECK (scope = 'rate' OR scope = 'group_rate' OR scope = 'running'),
    CONSTRAINT window_fits_scope CHECK ((scope = 'running') = (window_ms = 0)),
    CONSTRAINT window_bounded CHECK (window_ms >= 0 AND window_ms <= 86400000),
    CONSTRAINT count_bounded CHECK (max_count >= 1 AND max_count <= 1000000)
) WITHOUT ROWID;

-- When each attempt of a rate-limited queue started (its claim), by the store's clock: what
-- the limits count. Written by the claim only for a queue with a rate limit; a claim deletes
-- the rows older than the queue's longest window. WITHOUT ROWID, keyed by (queue, at, claim
-- id): a start is one B-tree entry, read in window order by its key, instead of a row and an
-- index entry. The claim id tells two starts at one instant apart, as (job, attempt) cannot:
-- a replay restarts the attempt counter, so a replayed job claimed again within the same
-- millisecond (or after the clock stepped back) starts the same attempt a second time.
CREATE TABLE fenceq_starts (
    queue      TEXT    NOT NULL,
    at         INTEGER NOT NULL,
    claim_id   BLOB    NOT NULL,
    job_id     INTEGER NOT NULL,
    attempt    INTEGER NOT NULL,
    group_name TEXT,
    PRIMARY KEY (queue, at, claim_id)
) WITHOUT ROWID;
CREATE INDEX fenceq_starts_group ON fenceq_starts (queue, group_name, at) WHERE group_name IS NOT NULL;
