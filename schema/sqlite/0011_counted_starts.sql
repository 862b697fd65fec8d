-- The starts a claim records for one group (or for no group) at its one instant become one row
-- of `fenceq_starts`, their number in `starts`, instead of one row per start: a claim of 64
-- ungrouped jobs writes one B-tree entry where it wrote 64, and the claim forgets one where it
-- forgot 64. Windows count `sum(starts)`. `claim_id`, `job_id` and `attempt` are those of the
-- row's first start (the claim id keeps the key unique: no two claims hand out one claim id).
-- Rows written before this version hold one start each.
ALTER TABLE fenceq_starts ADD COLUMN starts INTEGER NOT NULL DEFAULT 1 CONSTRAINT starts_counted CHECK (starts >= 1);
-- The group index carries the count, so that a group's window is summed from the index alone,
-- as it was counted before.
DROP INDEX fenceq_starts_group;
CREATE INDEX fenceq_starts_group ON fenceq_starts (queue, group_name, at, starts) WHERE group_name IS NOT NULL;
