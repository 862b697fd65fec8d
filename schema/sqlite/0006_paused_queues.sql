-- Level 1, base lifecycle: paused queues. A queue exists by name (there is no row per queue
-- until someone pauses it); a row here records the queue's pause, and after an unpause who
-- unpaused it, as the jobs' `decision` columns record an operator's last change of a job.
-- Claims of a queue whose `paused_at` is set find nothing (`CLAIM_SELECT`); enqueues,
-- settles, renewals, the reaper and retention are unaffected. WITHOUT ROWID: the claim's
-- check is one probe of the primary key's B-tree, with no rowid lookup after it.
CREATE TABLE fenceq_queues (
    queue         TEXT    NOT NULL PRIMARY KEY,
    paused_at     INTEGER,                -- NULL while the queue is not paused
    decision      TEXT    NOT NULL,       -- the last change: 'pause' or 'unpause'
    decided_at    INTEGER NOT NULL,
    decided_by    TEXT,
    decision_note TEXT,
    CONSTRAINT queue_named CHECK (length(queue) > 0),
    CONSTRAINT decision_valid CHECK (decision = 'pause' OR decision = 'unpause'),
    CONSTRAINT paused_iff_pause CHECK ((paused_at IS NOT NULL) = (decision = 'pause')),
    CONSTRAINT paused_when_decided CHECK (paused_at IS NULL OR paused_at = decided_at)
) WITHOUT ROWID;
