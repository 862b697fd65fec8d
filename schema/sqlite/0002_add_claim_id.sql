-- Level 2, fenced identity: every claim gets a persisted, globally unique claim id, and every
-- token-taking write compares {id, attempt, claim_id}. The pair {id, attempt} alone is not
-- enough: an admin replay resets the attempt counter and brings an old pair back.
ALTER TABLE fenceq_jobs ADD COLUMN claim_id BLOB;

-- Rows claimed by an older build have no claim id. Give each a random one that no token
-- carries, so such a claim can no longer settle: its owner cannot present the full identity.
UPDATE fenceq_jobs
SET    claim_id = randomblob(16)
WHERE  state IN ('running', 'waiting', 'exhausted', 'unknown');

-- A CHECK cannot be added to an existing table, so triggers hold the rule that a claimed
-- (or claim-keeping) row always carries its claim id. (OR chains rather than IN lists, as in
-- 0001: an IN list of constants costs an ephemeral table per statement execution.)
CREATE TRIGGER fenceq_jobs_claim_id_insert
BEFORE INSERT ON fenceq_jobs
WHEN NEW.claim_id IS NULL
 AND (NEW.state = 'running' OR NEW.state = 'waiting' OR NEW.state = 'exhausted' OR NEW.state = 'unknown')
BEGIN
    SELECT RAISE(ABORT, 'fenceq: a claimed row must carry its claim_id');
END;

CREATE TRIGGER fenceq_jobs_claim_id_update
BEFORE UPDATE OF state, claim_id ON fenceq_jobs
WHEN NEW.claim_id IS NULL
 AND (NEW.state = 'running' OR NEW.state = 'waiting' OR NEW.state = 'exhausted' OR NEW.state = 'unknown')
BEGIN
    SELECT RAISE(ABORT, 'fenceq: a claimed row must carry its claim_id');
END;
