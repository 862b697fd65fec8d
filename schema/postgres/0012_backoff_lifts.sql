-- Who lifted a queue's back-off before it ended, when and why, as SQLite's 0012: the queue's
-- last lift, kept on its flow row, with the reason of the back-off lifted. NULL on every row
-- until a lift.
ALTER TABLE fenceq_queue_flow
    ADD COLUMN lifted_at     BIGINT,
    ADD COLUMN lifted_by     TEXT,
    ADD COLUMN lift_note     TEXT,
    ADD COLUMN lifted_reason TEXT,
    ADD CONSTRAINT lift_recorded CHECK ((lifted_at IS NULL) = (lifted_reason IS NULL)
                                       AND (lifted_at IS NOT NULL OR (lifted_by IS NULL AND lift_note IS NULL)));
