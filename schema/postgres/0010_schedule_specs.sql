-- What each periodic job is, for the processes that did not register it (the CLI, `fenceq
-- serve`), as SQLite's 0010: the definition as registered (`definition`, the schedule as it
-- displays itself: the cron expression and its time zone, or the interval and its anchor;
-- `queue`, where its ticks are enqueued), the next tick the registering process computed
-- (`next_tick`, ms since the epoch) and when it last recorded either (`recorded_at`, its
-- queue clock's now). Written on registration (a row without a tick yet) and with every tick;
-- only the process that can parse the expression writes them, every build reads them. All
-- NULL on rows of older builds. A registration makes a row before its first tick, so
-- `last_tick` and `enqueued_at` become nullable (both or neither).
ALTER TABLE fenceq_schedules
    ALTER COLUMN last_tick DROP NOT NULL,
    ALTER COLUMN enqueued_at DROP NOT NULL,
    ADD COLUMN definition  TEXT,
    ADD COLUMN queue       TEXT,
    ADD COLUMN next_tick   BIGINT,
    ADD COLUMN recorded_at BIGINT,
    ADD CONSTRAINT tick_with_time CHECK ((last_tick IS NULL) = (enqueued_at IS NULL));
