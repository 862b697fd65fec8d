-- The history of a job's attempts, as SQLite's 0019: one record for every attempt that did not
-- complete (a retry, a snooze or a provider's back-off, an exhaustion, an unknown outcome, a
-- park, a lease that ran out and was reaped or reclaimed, a park whose deadline passed), written
-- by the statement of the settle, reap or claim that ended the attempt (a settle runs as one
-- statement in autocommit: the record is a data-modifying CTE of that statement). A completion
-- writes none, and nothing is added to the jobs table: a record's start is the claim's instant,
-- which the claim id carries from this version on.

-- A claim id for a claim at `p_now` (ms): a UUID of RFC 9562's version 7, the instant in its
-- first 48 bits, then 74 random bits (as the SQLite store's `ClaimId::generate_at`); a random
-- one (version 4) for an instant that 48 bits do not hold. A single expression, so the
-- planner inlines it into the claim's statement.
CREATE OR REPLACE FUNCTION fenceq_claim_id(p_now BIGINT) RETURNS UUID
LANGUAGE sql VOLATILE AS $$
    SELECT CASE WHEN p_now >= 0 AND p_now < 281474976710656
                THEN encode(set_byte(overlay(uuid_send(gen_random_uuid()) PLACING substring(int8send(p_now) FROM 3)
                                             FROM 1 FOR 6),
                                     6, 112 + floor(random() * 16)::int), 'hex')::uuid
                ELSE gen_random_uuid() END
$$;

-- The instant a claim id carries (`fenceq_claim_id`), NULL for one that carries none (a random
-- id, as every build before this version issued).
CREATE OR REPLACE FUNCTION fenceq_claim_instant(p_claim UUID) RETURNS BIGINT
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN get_byte(uuid_send(p_claim), 6) >> 4 = 7
                THEN ('x' || encode(substring(uuid_send(p_claim) FROM 1 FOR 6), 'hex'))::bit(48)::bigint END
$$;

-- Keyed by (job, seq), `seq` drawn from the table's own sequence: it rises with every record,
-- so the key orders a job's records as they were written, and is the index of "this job's
-- records, newest first" and of the prune's delete. The attempt number alone is no key: a
-- replay starts a job's attempts from 1 again, and a parked attempt whose deadline passed has
-- two records (`parked`, then `wait_expired`).
--
-- No foreign key to `fenceq_jobs`, as on SQLite: prune deletes a job's records in the same
-- statement as the job (one set-based delete through this key, where a key's cascade runs a
-- trigger per deleted job, and a key's check would lock the job's row again for every record
-- written). Job ids are never reused, so a record can never be taken for another job's.
CREATE TABLE fenceq_attempts (
    job_id     BIGINT  NOT NULL,
    seq        BIGINT  GENERATED ALWAYS AS IDENTITY,
    attempt    INTEGER NOT NULL CONSTRAINT attempt_record_claimed CHECK (attempt >= 1),
    claim_id   UUID    NOT NULL,
    outcome    TEXT    NOT NULL CONSTRAINT attempt_record_outcome
               CHECK (outcome IN ('retry', 'snooze', 'backoff', 'exhausted', 'unknown', 'parked', 'lease_expired',
                                  'wait_expired')),
    worker     TEXT,
    started_at BIGINT,
    ended_at   BIGINT  NOT NULL,
    error      TEXT,
    PRIMARY KEY (job_id, seq)
);

-- The claims, as 0016 (`fenceq_claim`), 0009 (`fenceq_claim_limited`) and 0015
-- (`fenceq_claim_grouped`) wrote them, with two changes: each claim id carries the claim's
-- instant (`fenceq_claim_id`), and the claim of a running job whose lease ran out records the
-- attempt it takes over (`lost`: `lease_expired`, ended at the claim's instant), from the
-- row's version the claim locked, before its update (the grouped claim, whose candidates are
-- read without locks, locks its chosen rows first). The same arguments and results: a process
-- of the build before keeps calling them, and its claims record as this build's do.

CREATE OR REPLACE FUNCTION fenceq_claim(p_queue TEXT, p_now BIGINT, p_limit BIGINT, p_worker TEXT, p_lease_ms BIGINT)
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
        SELECT j.id, j.priority, j.run_at, j.attempt, j.claim_id, j.worker
        FROM   fenceq_jobs AS j
        WHERE  (SELECT claimable FROM queue_open)
          AND  j.queue = p_queue AND j.state = 'running' AND j.lease_until <= (SELECT now FROM clock)
          AND  j.attempt < j.max_attempts
        ORDER  BY j.priority DESC, j.run_at, j.id
        LIMIT  p_limit
        FOR UPDATE SKIP LOCKED
    ), due AS (
        SELECT both_kinds.id
        FROM   (SELECT p.id, p.priority, p.run_at FROM pending AS p
                UNION ALL SELECT e.id, e.priority, e.run_at FROM expired AS e) AS both_kinds
        ORDER  BY both_kinds.priority DESC, both_kinds.run_at, both_kinds.id
        LIMIT  p_limit
    ), lost AS (
        INSERT INTO fenceq_attempts (job_id, attempt, claim_id, outcome, worker, started_at, ended_at, error)
        SELECT e.id, e.attempt, e.claim_id, 'lease_expired', e.worker, fenceq_claim_instant(e.claim_id), (SELECT now FROM clock),
               'lease expired (worker ' || e.worker || ')'
        FROM   expired AS e
        WHERE  e.id = ANY (ARRAY(SELECT due.id FROM due))
    )
    UPDATE fenceq_jobs AS j
    SET    state = 'running', attempt = j.attempt + 1, claim_id = fenceq_claim_id(clock.now), worker = p_worker,
           lease_until = clock.now + p_lease_ms, heartbeat_at = clock.now, wait_until = NULL
    FROM   clock
    WHERE  j.id = ANY (ARRAY(SELECT due.id FROM due))
    RETURNING j.id, j.queue, j.key, j.payload, j.priority, j.run_at, j.attempt, j.max_attempts,
              j.lease_until, j.last_error, j.claim_id, j.group_name;
END
$$;

CREATE OR REPLACE FUNCTION fenceq_claim_limited(
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
        SELECT j.id, j.priority, j.run_at, j.attempt, j.claim_id, j.worker
        FROM   fenceq_jobs AS j
        WHERE  j.queue = p_queue AND j.state = 'running' AND j.lease_until <= now_ms
          AND  j.attempt < j.max_attempts
        ORDER  BY j.priority DESC, j.run_at, j.id
        LIMIT  allowed
        FOR UPDATE SKIP LOCKED
    ), due AS (
        SELECT d.id
        FROM   (SELECT p.id, p.priority, p.run_at FROM pending AS p
                UNION ALL SELECT e.id, e.priority, e.run_at FROM expired AS e) AS d
        ORDER  BY d.priority DESC, d.run_at, d.id
        LIMIT  allowed
    ), claimed AS (
        UPDATE fenceq_jobs AS j
        SET    state = 'running', attempt = j.attempt + 1, claim_id = fenceq_claim_id(now_ms), worker = p_worker,
               lease_until = leased, heartbeat_at = now_ms, wait_until = NULL
        FROM   due
        WHERE  j.id = due.id
          AND  NOT EXISTS (SELECT 1 FROM fenceq_queues AS q WHERE q.queue = p_queue AND q.paused_at IS NOT NULL)
          AND  NOT EXISTS (SELECT 1 FROM fenceq_queue_flow AS f WHERE f.queue = p_queue AND f.backoff_until > now_ms)
        RETURNING j.id, j.queue, j.key, j.payload, j.priority, j.run_at, j.attempt, j.max_attempts,
                  j.lease_until, j.last_error, j.claim_id, j.group_name
    ), lost AS (
        INSERT INTO fenceq_attempts (job_id, attempt, claim_id, outcome, worker, started_at, ended_at, error)
        SELECT e.id, e.attempt, e.claim_id, 'lease_expired', e.worker, fenceq_claim_instant(e.claim_id), now_ms,
               'lease expired (worker ' || e.worker || ')'
        FROM   expired AS e
        WHERE  e.id IN (SELECT c.id FROM claimed AS c)
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
        -- The chosen rows are locked first, so that the claim's statement (a fresh snapshot)
        -- reads each one's latest version, which no other transaction can change before this
        -- one ends: an attempt the claim takes over is recorded as the claim found it.
        PERFORM 1 FROM fenceq_jobs AS j WHERE j.id = ANY(chosen) ORDER BY j.id FOR UPDATE;
        RETURN QUERY
        WITH expired AS (
            SELECT j.id, j.attempt, j.claim_id, j.worker
            FROM   fenceq_jobs AS j
            WHERE  j.id = ANY(chosen) AND j.state = 'running' AND j.lease_until <= now_ms
              AND  j.attempt < j.max_attempts
        ), claimed AS (
            UPDATE fenceq_jobs AS j
            SET    state = 'running', attempt = j.attempt + 1, claim_id = fenceq_claim_id(now_ms),
                   worker = p_worker, lease_until = leased, heartbeat_at = now_ms, wait_until = NULL
            WHERE  j.id = ANY(chosen)
              AND  ((j.state = 'pending' AND NOT j.group_held AND j.run_at <= now_ms)
                    OR (j.state = 'running' AND j.lease_until <= now_ms AND j.attempt < j.max_attempts))
            RETURNING j.id, j.queue, j.key, j.payload, j.priority, j.run_at, j.attempt, j.max_attempts,
                      j.lease_until, j.last_error, j.claim_id, j.group_name
        ), lost AS (
            INSERT INTO fenceq_attempts (job_id, attempt, claim_id, outcome, worker, started_at, ended_at, error)
            SELECT e.id, e.attempt, e.claim_id, 'lease_expired', e.worker, fenceq_claim_instant(e.claim_id), now_ms,
                   'lease expired (worker ' || e.worker || ')'
            FROM   expired AS e
            WHERE  e.id IN (SELECT c.id FROM claimed AS c)
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
