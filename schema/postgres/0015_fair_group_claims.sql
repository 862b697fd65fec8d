-- A fair order between the groups of a queue with group rates. Claims read heads in
-- (priority, run_at, id) order. A claim that passes over a head whose group's rate is spent
-- defers it (its `run_at` moved on to the instant the rate opens), but the job held behind a
-- claimed head was released at its enqueue instant: once released, it sorted before every head
-- a claim had deferred, so a group served recently passed groups that had waited longer. Under
-- a queue rate that cannot serve every group in each window, some groups fell ever further
-- behind and finished alone at their own group rate, far below the queue's.
--
-- The claim now also defers, for each job it claims, the next job held behind it in its group,
-- until the rates of the group that this start spent open (`store::limits::claim_limited` and
-- the kit's model do the same). Every head of a spent group then waits in the order its group
-- last started. `fenceq_group_opens_at` is the group rates' window, used for both deferrals.
--
-- The same arguments and result as 0014's function: a process of the build before keeps
-- calling it, and gets the fair order too.
CREATE OR REPLACE FUNCTION fenceq_group_opens_at(
    p_queue TEXT, p_group TEXT, p_now BIGINT, p_group_counts BIGINT[], p_group_windows BIGINT[])
RETURNS BIGINT
LANGUAGE plpgsql STABLE AS $$
DECLARE
    starts  BIGINT;
    rate_at BIGINT;
    latest  BIGINT;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_group_counts), 0) LOOP
        SELECT count(*) INTO starts
        FROM  (SELECT 1 FROM fenceq_starts AS s
               WHERE s.queue = p_queue AND s.group_name = p_group
                 AND s.group_name IS NOT NULL AND s.at > p_now - p_group_windows[i]
               ORDER BY s.at DESC LIMIT p_group_counts[i]) AS w;
        IF starts >= p_group_counts[i] THEN
            SELECT s.at + p_group_windows[i] INTO rate_at FROM fenceq_starts AS s
            WHERE  s.queue = p_queue AND s.group_name = p_group
              AND  s.group_name IS NOT NULL AND s.at > p_now - p_group_windows[i]
            ORDER  BY s.at DESC OFFSET p_group_counts[i] - 1 LIMIT 1;
            latest := GREATEST(latest, rate_at);
        END IF;
    END LOOP;
    RETURN latest;
END
$$;

CREATE OR REPLACE FUNCTION fenceq_claim_grouped(
    p_queue TEXT, p_now BIGINT, p_want BIGINT, p_worker TEXT, p_lease_until BIGINT,
    p_rate_count BIGINT, p_rate_window BIGINT, p_max_running BIGINT,
    p_group_counts BIGINT[], p_group_windows BIGINT[])
RETURNS TABLE (id BIGINT, queue TEXT, key TEXT, payload BYTEA, priority INTEGER, run_at BIGINT,
               attempt INTEGER, max_attempts INTEGER, lease_until BIGINT, last_error TEXT,
               claim_id UUID, group_name TEXT, opens_at BIGINT)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    allowed      BIGINT := p_want;
    now_ms       BIGINT := p_now;
    leased       BIGINT := p_lease_until;
    latest       BIGINT;
    running      BIGINT;
    kept         BIGINT;
    starts       BIGINT;
    rate_opens   BIGINT;
    group_opens  BIGINT;
    spent_until  BIGINT;
    longest      BIGINT;
    chosen       BIGINT[] := '{}';
    candidate    RECORD;
    claimed_any  BOOLEAN := false;
BEGIN
    PERFORM 1 FROM fenceq_queue_flow AS f WHERE f.queue = p_queue FOR UPDATE;
    SELECT coalesce((SELECT f.starts_kept FROM fenceq_queue_flow AS f WHERE f.queue = p_queue), 0),
           (SELECT max(s.at) FROM fenceq_starts AS s WHERE s.queue = p_queue)
    INTO   kept, latest;
    IF latest > now_ms THEN
        leased := leased + (latest - now_ms);
        now_ms := latest;
    END IF;
    IF p_max_running IS NOT NULL THEN
        SELECT count(*) INTO running FROM fenceq_jobs AS j WHERE j.queue = p_queue AND j.state = 'running';
        allowed := LEAST(allowed, GREATEST(p_max_running - running, 0));
    END IF;
    -- While the queue keeps fewer starts than the rate leaves room for this claim, no window
    -- can stop it: none is counted.
    IF p_rate_count IS NOT NULL AND kept + allowed > p_rate_count THEN
        SELECT count(*) INTO starts
        FROM  (SELECT 1 FROM fenceq_starts AS s
               WHERE s.queue = p_queue AND s.at > now_ms - p_rate_window
               ORDER BY s.at DESC LIMIT p_rate_count) AS w;
        allowed := LEAST(allowed, GREATEST(p_rate_count - starts, 0));
        IF starts >= p_rate_count THEN
            SELECT s.at + p_rate_window INTO rate_opens FROM fenceq_starts AS s
            WHERE  s.queue = p_queue AND s.at > now_ms - p_rate_window
            ORDER  BY s.at DESC OFFSET p_rate_count - 1 LIMIT 1;
        END IF;
    END IF;
    IF allowed > 0 THEN
        FOR candidate IN
            SELECT c.id, c.group_name FROM (
                (SELECT j.id, j.priority, j.run_at, j.group_name
                 FROM   fenceq_jobs AS j
                 WHERE  j.queue = p_queue AND j.state = 'pending' AND NOT j.group_held AND j.run_at <= now_ms
                 ORDER  BY j.priority DESC, j.run_at, j.id
                 LIMIT  allowed + 32)
                UNION ALL
                (SELECT j.id, j.priority, j.run_at, j.group_name
                 FROM   fenceq_jobs AS j
                 WHERE  j.queue = p_queue AND j.state = 'running' AND j.lease_until <= now_ms
                   AND  j.attempt < j.max_attempts
                 ORDER  BY j.priority DESC, j.run_at, j.id
                 LIMIT  allowed + 32)
            ) AS c
            WHERE NOT EXISTS (SELECT 1 FROM fenceq_queues AS q WHERE q.queue = p_queue AND q.paused_at IS NOT NULL)
              AND NOT EXISTS (SELECT 1 FROM fenceq_queue_flow AS f WHERE f.queue = p_queue AND f.backoff_until > now_ms)
            ORDER BY c.priority DESC, c.run_at, c.id
            LIMIT allowed + 32
        LOOP
            EXIT WHEN cardinality(chosen) >= allowed;
            spent_until := NULL;
            IF candidate.group_name IS NOT NULL THEN
                spent_until := fenceq_group_opens_at(p_queue, candidate.group_name, now_ms,
                                                     p_group_counts, p_group_windows);
            END IF;
            IF spent_until IS NULL THEN
                chosen := chosen || candidate.id;
            ELSE
                UPDATE fenceq_jobs AS j SET run_at = GREATEST(j.run_at, spent_until)
                WHERE  j.id = candidate.id AND j.state = 'pending';
                group_opens := LEAST(group_opens, spent_until);
            END IF;
        END LOOP;
    END IF;
    IF cardinality(chosen) > 0 THEN
        SELECT max(w) INTO longest FROM unnest(p_group_counts, p_group_windows) AS r(c, w);
        longest := GREATEST(longest, p_rate_window);
        RETURN QUERY
        WITH claimed AS (
            UPDATE fenceq_jobs AS j
            SET    state = 'running', attempt = j.attempt + 1, claim_id = gen_random_uuid(),
                   worker = p_worker, lease_until = leased, heartbeat_at = now_ms, wait_until = NULL
            WHERE  j.id = ANY(chosen)
              AND  ((j.state = 'pending' AND NOT j.group_held AND j.run_at <= now_ms)
                    OR (j.state = 'running' AND j.lease_until <= now_ms AND j.attempt < j.max_attempts))
            RETURNING j.id, j.queue, j.key, j.payload, j.priority, j.run_at, j.attempt, j.max_attempts,
                      j.lease_until, j.last_error, j.claim_id, j.group_name
        ), forgotten AS (
            DELETE FROM fenceq_starts AS s
            WHERE  s.queue = p_queue AND s.at <= now_ms - longest AND EXISTS (SELECT 1 FROM claimed)
            RETURNING 1
        ), recorded AS (
            INSERT INTO fenceq_starts (queue, group_name, at, job_id)
            SELECT p_queue, c.group_name, now_ms, c.id FROM claimed AS c
            RETURNING 1
        ), kept_in_step AS (
            UPDATE fenceq_queue_flow AS f
            SET    starts_kept = f.starts_kept + (SELECT count(*) FROM recorded) - (SELECT count(*) FROM forgotten)
            WHERE  f.queue = p_queue
            RETURNING 1
        )
        SELECT c.*, NULL::BIGINT FROM claimed AS c;
        GET DIAGNOSTICS starts = ROW_COUNT;
        claimed_any := starts > 0;
        -- The job held behind each claimed one in its group waits until the rates this start
        -- spent open (the starts just recorded are this claim's: the lock admits no other).
        FOR candidate IN
            SELECT s.group_name FROM fenceq_starts AS s
            WHERE  s.queue = p_queue AND s.at = now_ms AND s.job_id = ANY(chosen) AND s.group_name IS NOT NULL
        LOOP
            spent_until := fenceq_group_opens_at(p_queue, candidate.group_name, now_ms,
                                                 p_group_counts, p_group_windows);
            IF spent_until IS NOT NULL THEN
                UPDATE fenceq_jobs AS j SET run_at = GREATEST(j.run_at, spent_until)
                WHERE  j.id = (SELECT n.id FROM fenceq_jobs AS n
                               WHERE  n.queue = p_queue AND n.group_name = candidate.group_name
                                 AND  n.group_held AND n.state = 'pending'
                               ORDER  BY n.id LIMIT 1);
            END IF;
        END LOOP;
    END IF;
    IF NOT claimed_any AND coalesce(rate_opens, group_opens) IS NOT NULL THEN
        RETURN QUERY SELECT NULL::BIGINT, NULL::TEXT, NULL::TEXT, NULL::BYTEA, NULL::INTEGER, NULL::BIGINT,
                            NULL::INTEGER, NULL::INTEGER, NULL::BIGINT, NULL::TEXT, NULL::UUID, NULL::TEXT,
                            coalesce(rate_opens, group_opens);
    END IF;
END
$$;
