-- Version 7 on SQLite rebuilt its jobs table so that the claim-id rule, there two triggers
-- since 0002, became a CHECK. PostgreSQL could add that CHECK to the existing table in its
-- own 0002 (`claimed_has_claim_id`), so nothing changes here but the rule's description:
-- both stores keep the same version numbers for the same rules.
COMMENT ON CONSTRAINT claimed_has_claim_id ON fenceq_jobs IS
    'fenceq: a claimed (or claim-keeping) row always carries its claim id';
