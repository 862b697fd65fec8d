-- The claim of a queue whose limits are queue-wide only (a rate, a running limit), in one call
-- instead of a transaction of seven statements: what `store::limits::claim_limited` does for
-- such a queue, step for step, run by the server. The claims of a limited queue are serialised
-- by the lock of its `fenceq_queue_flow` row, so the time that lock is held bounds how many
-- claims a second every process together gets; here it is held for the function's run, not
-- for seven round trips. A queue with group rates still takes `claim_limited`'s transaction
-- (each candidate's group is counted on its own).
--
-- Each statement of a VOLATILE function sees a fresh snapshot, so the counts read after the
-- lock include every claim that committed before this one took it. A claim's instant was read
-- before it waited for the lock, so a claim that waited starts at the latest recorded start
-- if that is later (its lease moved on as much), as `claim_limited` does: recorded starts stay
-- in lock order, and no claim counts a window whose earlier starts a previous claim, at a later
-- instant, has already forgotten. Starts are forgotten only by a claim that records some.
--
-- Arguments: the queue, now (the server's clock, as every claim reads it), how many the caller
-- wants, its worker name, the lease's end, the queue's rate (count, window in ms; both NULL
-- without one) and its running limit (NULL without one). Returns the claimed rows as `CLAIM`
-- does; an empty result leaves the caller to read when a full window opens.
CREATE FUNCTION fenceq_claim_limited(
    p_queue TEXT, p_now BIGINT, p_want BIGINT, p_worker TEXT, p_lease_until BIGINT,
    p_rate_count BIGINT, p_rate_window BIGINT, p_max_running BIGINT)
RETURNS TABLE (id BIGINT, queue TEXT, key TEXT, payload BYTEA, priority INTEGER, run_at BIGINT,
               attempt INTEGER, max_attempts INTEGER, lease_until BIGINT, last_error TEXT,
               claim_id UUID, group_name TEXT)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    allowed BIGINT := p_want;
    now_ms  BIGINT := p_now;
    leased  BIGINT := p_lease_until;
    latest  BIGINT;
    running BIGINT;
    kept    BIGINT;
    starts  BIGINT;
BEGIN
    PERFORM 1 FROM fenceq_queue_flow AS f WHERE f.queue = p_queue FOR UPDATE;
    IF p_rate_count IS NOT NULL THEN
        SELECT max(s.at) INTO latest FROM fenceq_starts AS s WHERE s.queue = p_queue;
        IF latest > now_ms THEN
            leased := leased + (latest - now_ms);
            now_ms := latest;
        END IF;
    END IF;
    IF p_max_running IS NOT NULL THEN
        SELECT count(*) INTO running FROM fenceq_jobs AS j WHERE j.queue = p_queue AND j.state = 'running';
        allowed := LEAST(allowed, GREATEST(p_max_running - running, 0));
    END IF;
    -- While the queue keeps fewer starts than the rate leaves room for this claim, no window
    -- can stop it: none is counted.
    IF p_rate_count IS NOT NULL AND allowed > 0 THEN
        SELECT coalesce((SELECT f.starts_kept FROM fenceq_queue_flow AS f WHERE f.queue = p_queue), 0) INTO kept;
        IF kept + allowed > p_rate_count THEN
            SELECT count(*) INTO starts
            FROM  (SELECT 1 FROM fenceq_starts AS s
                   WHERE s.queue = p_queue AND s.at > now_ms - p_rate_window LIMIT p_rate_count) AS w;
            allowed := LEAST(allowed, GREATEST(p_rate_count - starts, 0));
        END IF;
    END IF;
    IF allowed <= 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH pending AS (
        SELECT j.id, j.priority, j.run_at
        FROM   fenceq_jobs AS j
        WHERE  j.queue = p_queue AND j.state = 'pending' AND NOT j.group_held AND j.run_at <= now_ms
        ORDER  BY j.priority DESC, j.run_at, j.id
        LIMIT  allowed
        FOR UPDATE SKIP LOCKED
    ), expired AS (
        SELECT j.id, j.priority, j.run_at
        FROM   fenceq_jobs AS j
        WHERE  j.queue = p_queue AND j.state = 'running' AND j.lease_until <= now_ms
          AND  j.attempt < j.max_attempts
        ORDER  BY j.priority DESC, j.run_at, j.id
        LIMIT  allowed
        FOR UPDATE SKIP LOCKED
    ), due AS (
        SELECT d.id FROM (SELECT * FROM pending UNION ALL SELECT * FROM expired) AS d
        ORDER  BY d.priority DESC, d.run_at, d.id
        LIMIT  allowed
    ), claimed AS (
        UPDATE fenceq_jobs AS j
        SET    state = 'running', attempt = j.attempt + 1, claim_id = gen_random_uuid(), worker = p_worker,
               lease_until = leased, heartbeat_at = now_ms, wait_until = NULL
        FROM   due
        WHERE  j.id = due.id
          AND  NOT EXISTS (SELECT 1 FROM fenceq_queues AS q WHERE q.queue = p_queue AND q.paused_at IS NOT NULL)
          AND  NOT EXISTS (SELECT 1 FROM fenceq_queue_flow AS f WHERE f.queue = p_queue AND f.backoff_until > now_ms)
        RETURNING j.id, j.queue, j.key, j.payload, j.priority, j.run_at, j.attempt, j.max_attempts,
                  j.lease_until, j.last_error, j.claim_id, j.group_name
    ), forgotten AS (
        DELETE FROM fenceq_starts AS s
        WHERE  p_rate_count IS NOT NULL AND s.queue = p_queue AND s.at <= now_ms - p_rate_window
          AND  EXISTS (SELECT 1 FROM claimed)
        RETURNING 1
    ), recorded AS (
        INSERT INTO fenceq_starts (queue, group_name, at, job_id)
        SELECT p_queue, c.group_name, now_ms, c.id FROM claimed AS c WHERE p_rate_count IS NOT NULL
        RETURNING 1
    ), kept_in_step AS (
        UPDATE fenceq_queue_flow AS f
        SET    starts_kept = f.starts_kept + (SELECT count(*) FROM recorded) - (SELECT count(*) FROM forgotten)
        WHERE  f.queue = p_queue AND p_rate_count IS NOT NULL
        RETURNING 1
    )
    SELECT c.* FROM claimed AS c;
END
$$;
