-- Who lifted a queue's back-off before it ended, when and why (`fenceq backoff clear --by
-- --note`, `Operator::clear_backoff`), with the reason of the back-off lifted: the queue's last
-- lift, kept on its flow row as the last pause decision is kept on its queue row. NULL on
-- every row until a lift.
ALTER TABLE fenceq_queue_flow ADD COLUMN lifted_at INTEGER;
ALTER TABLE fenceq_queue_flow ADD COLUMN lifted_by TEXT;
ALTER TABLE fenceq_queue_flow ADD COLUMN lift_note TEXT;
ALTER TABLE fenceq_queue_flow ADD COLUMN lifted_reason TEXT
    CONSTRAINT lift_recorded CHECK ((lifted_at IS NULL) = (lifted_reason IS NULL)
                                    AND (lifted_at IS NOT NULL OR (lifted_by IS NULL AND lift_note IS NULL)));
