-- A chain of durable commits handed from client to client inside PostgreSQL: the transaction
-- lock passes on at each durable commit (what a durable hot key's hand-off amounts to).
WITH l AS (SELECT pg_advisory_xact_lock(77)) UPDATE ceiling SET v = v + 1 WHERE id = 2 AND EXISTS (SELECT FROM l);
