-- The alternative: every client takes the key in turn (the rebuild_log names the statement).
INSERT INTO rebuild_log SELECT :client_id, dlock_acquire('cache', 'c' || :client_id, '30 seconds', '60 seconds') IS NOT NULL, clock_timestamp();
SELECT dlock_release('cache', 'c' || :client_id);
