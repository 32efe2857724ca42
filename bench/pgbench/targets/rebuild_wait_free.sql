-- The cache rebuild: wait until the builder's key is free, without taking it, and note when the
-- answer came. The note is written once every client has answered (after the sleep), so that
-- noting costs the others nothing.
SELECT dlock_wait_free('cache', '60 seconds')::int AS free, clock_timestamp() AS at \gset
\sleep 2 s
INSERT INTO rebuild_log VALUES (:client_id, :free = 1, ':at');
