-- No change of shape on PostgreSQL: SQLite's 0011 counts a claim's starts of one group in one
-- row of its starts log. PostgreSQL keeps a row per start: its limited claim of a queue-wide
-- limit runs in one server-side call (0009), where its rows are written without round trips.
-- The version exists so that a number means the same schema on both stores; it records what
-- a row of the log is, where `\d+` shows it.
COMMENT ON TABLE fenceq_starts IS
    'One row per started attempt of a queue with a rate limit (the claim''s instant, by the server''s clock); the limited claim counts these in its windows and deletes those older than the queue''s longest window.';
