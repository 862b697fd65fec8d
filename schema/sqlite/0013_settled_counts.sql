-- How many rows of each queue are settled for good: completed, cancelled, and exhausted and
-- acknowledged ('acknowledged'). Retention keeps such rows for days, so they outnumber the live
-- ones by far; `stats` reads their counts here instead of counting them, and counts only the
-- live states, each from its own partial index. Every statement that moves a row into or out of
-- one of these states (a completion, a cancel, an acknowledgement, a replay, retention) moves
-- its count in the same transaction; the CHECK refuses a count that would go below zero, so a
-- statement that forgot its count fails loudly instead of drifting.
CREATE TABLE fenceq_settled_counts (
    queue TEXT NOT NULL,
    state TEXT NOT NULL CONSTRAINT settled_count_state CHECK (state IN ('completed', 'cancelled', 'acknowledged')),
    count INTEGER NOT NULL CONSTRAINT settled_count_not_negative CHECK (count >= 0),
    PRIMARY KEY (queue, state)
) WITHOUT ROWID;

-- The rows settled before this version, counted once.
INSERT INTO fenceq_settled_counts (queue, state, count)
SELECT queue, CASE WHEN state = 'exhausted' THEN 'acknowledged' ELSE state END, count(*)
FROM   fenceq_jobs
WHERE  state IN ('completed', 'cancelled') OR (state = 'exhausted' AND acknowledged_at IS NOT NULL)
GROUP  BY 1, 2;
