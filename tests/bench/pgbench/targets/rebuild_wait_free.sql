-- The cache rebuild: wait until the builder's key is free, without taking it.
INSERT INTO rebuild_log SELECT :client_id, dlock_wait_free('cache', '60 seconds'), clock_timestamp();
