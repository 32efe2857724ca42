-- A hot key handed from client to client: each takes it (waiting without limit), holds it
-- :hold_ms, releases it; grant and release times (epoch seconds) go to sqled_handoff.
SELECT dlock_acquire('hot', 'c' || :client_id, '1 minute', NULL) AS f, extract(epoch FROM clock_timestamp()) AS g \gset
SELECT pg_sleep(:hold_ms / 1000.0);
SELECT dlock_release('hot', 'c' || :client_id) AS ok, extract(epoch FROM clock_timestamp()) AS r \gset
INSERT INTO sqled_handoff VALUES (:f, :g, :r);
