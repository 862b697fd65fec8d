-- What the operator's dashboard (`fenceq serve`) reads, readable without walking the table.
--
-- Counts per state and queue (the overview, a queue's tabs, /metrics): a covering index, so
-- that `GROUP BY state, queue` walks small index entries in order instead of every row of
-- the table with a sort; `count(acknowledged_at)` splits the exhausted by acknowledgement
-- from the same entries. The cost is one more index entry moved per state change.
-- Its `WHERE state <> ''` holds for every row (the CHECK lists the states); it is there so
-- that only a statement that repeats it may use the index (SQLite matches a partial index's
-- terms literally, and no other statement says this): a leading `state`
-- column would otherwise win the planner over the partial indexes (claim, lease, settled,
-- exhausted, unknown) for every statement with a `state = ?` term, and pruning, reaping and
-- the dead-letter listings would walk every job of a state instead of their own index.
-- (A column of the index, so the count stays covering; PostgreSQL's 0008 says
-- `created_at IS NOT NULL` instead, as its planner could prove `state <> ''` from
-- `state = 'pending'`.)
CREATE INDEX fenceq_jobs_counts ON fenceq_jobs (state, queue, acknowledged_at) WHERE state <> '';

-- Completions per minute (the overview's chart): the settled index also holds the
-- cancelled, so counting only the completed looked every entry's row up in the table; this
-- one holds the completed alone, and the count reads the index only.
CREATE INDEX fenceq_jobs_completed ON fenceq_jobs (settled_at) WHERE state = 'completed';
