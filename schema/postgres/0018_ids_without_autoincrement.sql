-- Nothing to change on PostgreSQL: its ids come from the table's sequence (`BIGSERIAL`), which
-- never hands an id out twice and costs an insert no extra page write. SQLite's 0018 drops
-- AUTOINCREMENT, whose sequence row every inserting transaction rewrote, for a floor that
-- prune raises. The version exists so that a number means the same schema on both stores.
SELECT 1;
