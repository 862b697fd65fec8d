-- Periodic jobs: the latest tick enqueued per schedule name. A tick is enqueued only when
-- it is later than the one recorded here, in the same transaction as its job, so that it
-- is enqueued once even after its job row was pruned, after a restart, after the clock
-- stepped back, and when several processes run the same schedule. Every build creates it
-- (the schema never depends on cargo features); only the `schedule` feature writes it.
CREATE TABLE fenceq_schedules (
    name        TEXT    PRIMARY KEY,
    last_tick   INTEGER NOT NULL,  -- ms since the Unix epoch: the tick's own time
    enqueued_at INTEGER NOT NULL,  -- the queue clock's now when it was enqueued
    CONSTRAINT name_valid CHECK (length(name) BETWEEN 1 AND 128)
) WITHOUT ROWID;
