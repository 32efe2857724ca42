-- One hot key with PostgreSQL's advisory lock.
SELECT pg_advisory_lock(78);
SELECT pg_advisory_unlock(78);
