-- What the operator's dashboard (`fenceq serve`) reads, as SQLite's 0008.
--
-- Counts per state and queue (the overview, a queue's tabs, /metrics): a covering index
-- (an index-only scan once the table is vacuumed) instead of a scan of every row with a
-- sort. The cost is one more index entry per state change. Its `WHERE created_at IS NOT
-- NULL` holds for every row; only a statement that repeats it may use the index, so that
-- no other statement's plan can move from its own partial index to this one (SQLite's 0008).
CREATE INDEX fenceq_jobs_counts ON fenceq_jobs (state, queue, acknowledged_at) WHERE created_at IS NOT NULL;

-- Completions per minute (the overview's chart): the completed alone, so that the count
-- does not visit the cancelled rows of the settled index.
CREATE INDEX fenceq_jobs_completed ON fenceq_jobs (settled_at) WHERE state = 'completed';
