-- How many rows of each queue are settled for good, as SQLite's 0013: completed, cancelled, and
-- exhausted and acknowledged ('acknowledged'). `stats` sums these counts instead of counting
-- the settled rows, and counts only the live states, each from its own partial index. Every
-- statement that moves a row into or out of one of these states moves its count in the same
-- transaction.
--
-- A count is split over 64 shards, each statement adding to one that no other transaction
-- holds (statements.rs, `counting_settled!`): a counter row is locked from its update to the
-- commit, so one row per (queue, state) would serialise every completion of the queue through
-- its commit's flush. A shard may go below zero (a row counted into one shard is pruned from
-- another); the sum over the shards is the count. The small fill factor keeps each shard's
-- updates on its own page (heap-only updates that need no new index entry).
CREATE TABLE fenceq_settled_counts (
    queue TEXT     NOT NULL,
    state TEXT     NOT NULL CONSTRAINT settled_count_state CHECK (state IN ('completed', 'cancelled', 'acknowledged')),
    shard SMALLINT NOT NULL CONSTRAINT settled_count_shard CHECK (shard BETWEEN 0 AND 63),
    count BIGINT   NOT NULL,
    PRIMARY KEY (queue, state, shard)
) WITH (fillfactor = 20);

-- The rows settled before this version, counted once, in shard 0.
INSERT INTO fenceq_settled_counts (queue, state, shard, count)
SELECT queue, CASE WHEN state = 'exhausted' THEN 'acknowledged' ELSE state END, 0, count(*)
FROM   fenceq_jobs
WHERE  state IN ('completed', 'cancelled') OR (state = 'exhausted' AND acknowledged_at IS NOT NULL)
GROUP  BY 1, 2;
