-- The counts `stats` reads, as a function whose plan each session makes once and keeps:
-- `fenceq_stats`. The live states are counted from their rows through their partial indexes
-- (the settled ones come from `fenceq_settled_counts`, schema 13).
--
-- Inline, the statement was planned on every call for the statistics of the moment, and
-- while autovacuum had not yet analysed a busy table those said its partial indexes were
-- small: the planner then read them with bitmap scans. A bitmap scan visits the table for
-- every entry of the index, including the entries of rows that left the index's state since
-- the last vacuum (every job claimed leaves one in the claim index, every job settled one in
-- the index of running jobs), and unlike an index scan it never marks such an entry dead for
-- the scans after it. So each `stats` call read every job that ran since the last vacuum,
-- tens of thousands of rows at a steady load (figures in `docs/performance.md`). Here bitmap
-- scans and sequential scans are priced out while the function runs (the `SET` clauses hold
-- only inside it): each live state is read by an index scan of its own index, whatever the
-- table held when the plan was made, and the first scan that meets an entry whose row no
-- transaction can still see marks it, so later calls skip it without visiting the table. Planning, which took longer than the reads (six branches), is
-- done once per session. Pricing paths out adds a huge constant to the plan's cost, above
-- `jit_above_cost`: `jit = off` keeps the server from compiling the plan on every call.
--
-- The rows are those the store's inline statement returned before this version: per queue,
-- the count of each live state (pending jobs not held behind their group, grouped pending jobs
-- held, running, waiting, unknown, unacknowledged exhaustions) with the oldest pending
-- `run_at` and the running jobs whose lease ended at or before `p_now`; then the kept count of
-- each settled state (an acknowledged exhaustion as `exhausted` with `acknowledged`), leaving
-- out the states counted to zero. A process of the build before keeps its inline statement,
-- which returns the same rows.
CREATE FUNCTION fenceq_stats(p_now BIGINT)
RETURNS TABLE (queue TEXT, state TEXT, acknowledged BOOLEAN, count BIGINT, min_run_at BIGINT, expired BIGINT)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH live AS (
        SELECT j.queue, 'pending' AS state, j.run_at, NULL::bigint AS lease_until
        FROM   fenceq_jobs AS j WHERE j.state = 'pending' AND NOT j.group_held
        UNION ALL
        SELECT j.queue, 'pending', j.run_at, NULL
        FROM   fenceq_jobs AS j
        WHERE  j.group_name IS NOT NULL AND j.state IN ('pending', 'running', 'waiting', 'unknown', 'exhausted')
          AND  j.group_held AND j.state = 'pending'
        UNION ALL
        SELECT j.queue, 'running', NULL, j.lease_until FROM fenceq_jobs AS j WHERE j.state = 'running'
        UNION ALL
        SELECT j.queue, 'waiting', NULL, NULL FROM fenceq_jobs AS j WHERE j.state = 'waiting'
        UNION ALL
        SELECT j.queue, 'unknown', NULL, NULL FROM fenceq_jobs AS j WHERE j.state = 'unknown'
        UNION ALL
        SELECT j.queue, 'exhausted', NULL, NULL FROM fenceq_jobs AS j
        WHERE  j.state = 'exhausted' AND j.acknowledged_at IS NULL
    )
    SELECT live.queue, live.state, false, count(*), min(live.run_at),
           count(*) FILTER (WHERE live.lease_until <= p_now)
    FROM   live
    GROUP  BY live.queue, live.state
    UNION ALL
    SELECT c.queue, CASE WHEN c.state = 'acknowledged' THEN 'exhausted' ELSE c.state END,
           c.state = 'acknowledged', sum(c.count)::bigint, NULL::bigint, 0::bigint
    FROM   fenceq_settled_counts AS c
    GROUP  BY c.queue, c.state
    HAVING sum(c.count) <> 0;
END
$$;
