-- What each periodic job is, for the processes that did not register it (the CLI, `fenceq
-- serve`): the definition as registered (`definition`, the schedule as it displays itself: the
-- cron expression and its time zone, or the interval and its anchor; `queue`, where its ticks
-- are enqueued), the next tick the registering process computed (`next_tick`, ms since the
-- epoch) and when it last recorded either (`recorded_at`, its queue clock's now). Written on
-- registration (a row without a tick yet) and with every tick; only the process that can parse
-- the expression writes them, every build reads them. All NULL on rows of older builds.
--
-- A registration makes a row before its first tick, so `last_tick` and `enqueued_at` become
-- nullable (both or neither). SQLite cannot drop a NOT NULL, hence the copy, as in 0007: new
-- table, rows copied by column name, old table dropped, the new one renamed.
CREATE TABLE fenceq_schedules_rebuilt (
    name        TEXT    PRIMARY KEY,
    last_tick   INTEGER,  -- ms since the Unix epoch: the tick's own time; NULL before the first
    enqueued_at INTEGER,  -- the queue clock's now when it was enqueued
    definition  TEXT,     -- e.g. cron "0 9 * * MON-FRI" in Europe/Berlin, every 60000 ms from 0
    queue       TEXT,     -- the queue its ticks are enqueued into
    next_tick   INTEGER,  -- ms since the Unix epoch: the next tick to enqueue
    recorded_at INTEGER,  -- the queue clock's now when the definition or next tick was written
    CONSTRAINT name_valid CHECK (length(name) BETWEEN 1 AND 128),
    CONSTRAINT tick_with_time CHECK ((last_tick IS NULL) = (enqueued_at IS NULL))
) WITHOUT ROWID;
INSERT INTO fenceq_schedules_rebuilt (name, last_tick, enqueued_at)
SELECT name, last_tick, enqueued_at FROM fenceq_schedules;
DROP TABLE fenceq_schedules;
ALTER TABLE fenceq_schedules_rebuilt RENAME TO fenceq_schedules;
