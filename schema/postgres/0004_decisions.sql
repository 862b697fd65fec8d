-- Level 3, decisions on the row: the last operator or reconciler change of a job (resolve,
-- replay, cancel, acknowledge), when it was made, by whom and why. NULL until the first
-- such change.
ALTER TABLE fenceq_jobs ADD COLUMN decision TEXT;
ALTER TABLE fenceq_jobs ADD COLUMN decided_at BIGINT;
ALTER TABLE fenceq_jobs ADD COLUMN decided_by TEXT;
ALTER TABLE fenceq_jobs ADD COLUMN decision_note TEXT;
