-- The plain claim (a queue with no limits) as a function whose plan is made once per session
-- and kept: `fenceq_claim`. The store's sessions plan every statement for its values
-- (`plan_cache_mode = force_custom_plan`), because a generic plan made while the table was
-- small keeps its shape as the table grows. For the claim that planning was the largest part of
-- the server's work per call (its CTEs, three probes and two arms take several times a simple
-- statement's planning). Inside this function the plan is generic and kept, and its shape is
-- pinned instead of left to the statistics of the moment it was made: with sequential scans,
-- bitmap scans and sorts priced out (the `SET` clauses hold only while the function runs), the
-- pending arm can only read the claim index in its order and stop after `p_limit` due rows,
-- whatever the table held when the plan was made. Without these settings, a plan made while
-- the table was empty (a new queue's) scanned the whole table on every claim. The claimed
-- ids are looked up by the primary key (`= ANY (ARRAY(...))`) rather than joined: with
-- sequential scans alone priced out, the join on a plan made so read every row through an
-- index to find them. The merge of the two arms still sorts its few rows: every plan of it does.
-- Pricing paths out adds a huge constant to the plan's cost, far above `jit_above_cost`: without
-- `jit = off` the server compiled the plan to machine code on every call (half a second each).
--
-- The statement is the one the store ran inline before this version (but for that lookup),
-- with the same rules:
--
-- * Up to `p_limit` claimable jobs of `p_queue` in (priority DESC, run_at, id) order: due
--   pending jobs not held behind their group, and running jobs whose lease ended at or before
--   the claim's instant with attempts left. Each is locked, skipping rows another transaction
--   holds (a concurrent claimer, or an owned write that locked its row), and claimed with a
--   fresh claim id and a lease `p_lease_ms` long from the claim's instant.
-- * The instant is `p_now` (ms), or when it is NULL the server's clock, read by the statement
--   itself after its snapshot (`clock`, materialised: one read for every use), so that every
--   job the claim can see was made due before it.
-- * Two arms, each with its own `LIMIT`, merged and cut to `p_limit` again: one `WHERE` with an
--   `OR` of both kinds made the planner sort every due row. The merged best `p_limit` of the
--   two best-`p_limit` lists are the best overall. CTEs rather than `WHERE id IN (subquery)`:
--   the planner may not keep a subquery's `LIMIT`.
-- * A row a concurrent transaction changed after the snapshot is re-checked against its arm's
--   `WHERE` as it is locked (READ COMMITTED), so a lease another claim just renewed or took is
--   never handed out.
-- * A paused queue, a queue backing off past the instant, and a queue with limits (claimed by
--   `fenceq_claim_limited` or `fenceq_claim_grouped` instead) claim nothing, and read and lock
--   no job: `queue_open` probes the three tables once, and each arm is gated on it (a condition that
--   names no column of the jobs: a one-time filter evaluated before the arm's scan).
--
-- The rows come back in no particular order; the store sorts them. A process of the build
-- before keeps running its inline statement, which claims the same rows the same way.
CREATE FUNCTION fenceq_claim(p_queue TEXT, p_now BIGINT, p_limit BIGINT, p_worker TEXT, p_lease_ms BIGINT)
RETURNS TABLE (id BIGINT, queue TEXT, key TEXT, payload BYTEA, priority INTEGER, run_at BIGINT,
               attempt INTEGER, max_attempts INTEGER, lease_until BIGINT, last_error TEXT,
               claim_id UUID, group_name TEXT)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $$
BEGIN
    RETURN QUERY
    WITH clock AS MATERIALIZED (
        SELECT coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
    ), queue_open AS MATERIALIZED (
        SELECT NOT EXISTS (SELECT 1 FROM fenceq_queues AS q WHERE q.queue = p_queue AND q.paused_at IS NOT NULL)
           AND NOT EXISTS (SELECT 1 FROM fenceq_queue_flow AS f
                           WHERE f.queue = p_queue AND f.backoff_until > (SELECT now FROM clock))
           AND NOT EXISTS (SELECT 1 FROM fenceq_limits AS l WHERE l.queue = p_queue) AS claimable
    ), pending AS (
        SELECT j.id, j.priority, j.run_at
        FROM   fenceq_jobs AS j
        WHERE  (SELECT claimable FROM queue_open)
          AND  j.queue = p_queue AND j.state = 'pending' AND NOT j.group_held
          AND  j.run_at <= (SELECT now FROM clock)
        ORDER  BY j.priority DESC, j.run_at, j.id
        LIMIT  p_limit
        FOR UPDATE SKIP LOCKED
    ), expired AS (
        SELECT j.id, j.priority, j.run_at
        FROM   fenceq_jobs AS j
        WHERE  (SELECT claimable FROM queue_open)
          AND  j.queue = p_queue AND j.state = 'running' AND j.lease_until <= (SELECT now FROM clock)
          AND  j.attempt < j.max_attempts
        ORDER  BY j.priority DESC, j.run_at, j.id
        LIMIT  p_limit
        FOR UPDATE SKIP LOCKED
    ), due AS (
        SELECT both_kinds.id FROM (SELECT * FROM pending UNION ALL SELECT * FROM expired) AS both_kinds
        ORDER  BY both_kinds.priority DESC, both_kinds.run_at, both_kinds.id
        LIMIT  p_limit
    )
    UPDATE fenceq_jobs AS j
    SET    state = 'running', attempt = j.attempt + 1, claim_id = gen_random_uuid(), worker = p_worker,
           lease_until = clock.now + p_lease_ms, heartbeat_at = clock.now, wait_until = NULL
    FROM   clock
    WHERE  j.id = ANY (ARRAY(SELECT due.id FROM due))
    RETURNING j.id, j.queue, j.key, j.payload, j.priority, j.run_at, j.attempt, j.max_attempts,
              j.lease_until, j.last_error, j.claim_id, j.group_name;
END
$$;
