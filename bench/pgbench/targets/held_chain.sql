-- The hot-key bound with PostgreSQL's own locks: a transaction lock taken in one round trip and
-- held across the client's next one, which writes durably and commits (the lock passes on at
-- that commit). A durable lock handed from client to client with the holder's round trip inside
-- its hold: what a hot dlock key's hand-off amounts to.
BEGIN \; SELECT pg_advisory_xact_lock(77);
UPDATE ceiling SET v = v + 1 WHERE id = 3 \; COMMIT;
