-- The alternative: every client takes the key in turn, and notes when it had it (written later,
-- as for rebuild_wait_free).
SELECT (dlock_acquire('cache', 'c' || :client_id, '30 seconds', '60 seconds') IS NOT NULL)::int AS free, clock_timestamp() AS at \gset
SELECT dlock_release('cache', 'c' || :client_id);
\sleep 2 s
INSERT INTO rebuild_log VALUES (:client_id, :free = 1, ':at');
