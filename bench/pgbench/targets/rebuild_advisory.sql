-- The cache rebuild with PostgreSQL's own lock: wait for a shared advisory lock while the
-- builder holds it exclusively (one unlock grants every shared waiter at once), and note when
-- the answer came, as rebuild_wait_free does.
SELECT 1 AS free, clock_timestamp() AS at FROM (SELECT pg_advisory_lock_shared(99)) l \gset
\sleep 2 s
INSERT INTO rebuild_log VALUES (:client_id, :free = 1, ':at');
