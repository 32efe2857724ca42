-- The floor of shared locking inside PostgreSQL: one advisory lock taken shared.
SELECT pg_advisory_lock_shared(4242);
SELECT pg_advisory_unlock_shared(4242);
