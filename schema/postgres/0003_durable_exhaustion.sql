-- Level 3, durable exhaustion: a job that runs out of attempts becomes an unacknowledged
-- terminal record that keeps its token; only an acknowledgement with that exact token makes
-- it prunable. Rows already exhausted count as exhausted when they settled.
ALTER TABLE fenceq_jobs ADD COLUMN exhausted_at BIGINT;
ALTER TABLE fenceq_jobs ADD COLUMN acknowledged_at BIGINT;

UPDATE fenceq_jobs
SET    exhausted_at = coalesce(settled_at, created_at)
WHERE  state = 'exhausted' AND exhausted_at IS NULL;

-- Exhaustion pages: ordered by id, cursor based, unacknowledged rows only.
CREATE INDEX fenceq_jobs_exhausted ON fenceq_jobs (id) WHERE state = 'exhausted' AND acknowledged_at IS NULL;

-- Unknown outcomes awaiting a reconciler, by id.
CREATE INDEX fenceq_jobs_unknown ON fenceq_jobs (id) WHERE state = 'unknown';

-- Retention of acknowledged exhaustions.
CREATE INDEX fenceq_jobs_acknowledged ON fenceq_jobs (acknowledged_at)
    WHERE state = 'exhausted' AND acknowledged_at IS NOT NULL;
