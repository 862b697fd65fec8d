-- Periodic jobs: the latest tick enqueued per schedule name, as SQLite's 0005. A tick is
-- enqueued only when it is later than the one recorded here, in the same transaction as its
-- job (`ADVANCE_SCHEDULE_IF_LATER`, one guarded upsert: of several racing transactions
-- exactly one wins), so that it is enqueued once even after its job row was pruned, after a
-- restart, after the clock stepped back, and when several processes run the same schedule.
-- Every build creates it (the schema never depends on cargo features); only the `schedule`
-- feature writes it.
CREATE TABLE fenceq_schedules (
    name        TEXT   PRIMARY KEY,
    last_tick   BIGINT NOT NULL,  -- ms since the Unix epoch: the tick's own time
    enqueued_at BIGINT NOT NULL,  -- the queue clock's now when it was enqueued
    CONSTRAINT name_valid CHECK (length(name) BETWEEN 1 AND 128)
);
