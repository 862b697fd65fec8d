-- Level 2, fenced identity: every claim gets a persisted, globally unique claim id (a native
-- uuid), and every token-taking write compares {id, attempt, claim_id}. The pair
-- {id, attempt} alone is not enough: an admin replay resets the attempt counter and brings
-- an old pair back.
ALTER TABLE fenceq_jobs ADD COLUMN claim_id UUID;

-- Rows claimed before this version have no claim id: each gets a random one that no token
-- carries, so such a claim can no longer settle (as SQLite's 0002 does).
UPDATE fenceq_jobs
SET    claim_id = gen_random_uuid()
WHERE  state IN ('running', 'waiting', 'exhausted', 'unknown');

-- PostgreSQL can add a CHECK to an existing table (SQLite needs triggers for this rule): a
-- claimed (or claim-keeping) row always carries its claim id.
ALTER TABLE fenceq_jobs ADD CONSTRAINT claimed_has_claim_id
    CHECK (claim_id IS NOT NULL OR state NOT IN ('running', 'waiting', 'exhausted', 'unknown'));
