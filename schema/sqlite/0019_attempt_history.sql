-- The history of a job's attempts: one record for every attempt that did not complete (a
-- retry, a snooze or a provider's back-off, an exhaustion, an unknown outcome, a park, a lease
-- that ran out and was reaped or reclaimed, a park whose deadline passed), written in the
-- transaction of the settle, reap or claim that ended the attempt. A completion writes none,
-- and nothing is added to the jobs table: a record's start is the claim's instant, which the
-- claim id of this version carries (a UUID of version 7: its first 48 bits are the instant in
-- ms), so a claim stores nothing more than it did. An attempt claimed before (a version 4 id)
-- is recorded without its start.

-- Keyed by (job, seq): `seq` numbers a job's records 1, 2, 3... in the order they were written
-- (the next is the job's largest plus one, read through this key under the writer's lock), so
-- the key is also the index of "this job's records, newest first" and of the prune's delete.
-- The attempt number alone is no key: a replay starts a job's attempts from 1 again, and a
-- parked attempt whose deadline passed has two records (`parked`, then `wait_expired`).
--
-- No foreign key to `fenceq_jobs`: prune deletes a job's records in its own transaction, by
-- this key. (With `foreign_keys=ON` a key would also turn the `DROP TABLE` of a migration that
-- rebuilds the jobs table, as 0007 and 0018 did, into a delete of every record, and a
-- migration's transaction cannot switch the pragma off.) Job ids are never reused, so a record
-- can never be taken for another job's.
CREATE TABLE fenceq_attempts (
    job_id     INTEGER NOT NULL,
    seq        INTEGER NOT NULL CONSTRAINT attempt_record_numbered CHECK (seq >= 1),
    attempt    INTEGER NOT NULL CONSTRAINT attempt_record_claimed CHECK (attempt >= 1),
    claim_id   BLOB    NOT NULL CONSTRAINT attempt_record_claim_id CHECK (length(claim_id) = 16),
    outcome    TEXT    NOT NULL CONSTRAINT attempt_record_outcome
               CHECK (outcome IN ('retry', 'snooze', 'backoff', 'exhausted', 'unknown', 'parked', 'lease_expired',
                                  'wait_expired')),
    worker     TEXT,
    started_at INTEGER,
    ended_at   INTEGER NOT NULL,
    error      TEXT,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
