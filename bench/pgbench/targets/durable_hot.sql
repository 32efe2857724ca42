-- One hot durable key, every client waiting.
SELECT dlock_acquire('hot-durable', 'c' || :client_id, '30 seconds', '30 seconds');
SELECT dlock_release('hot-durable', 'c' || :client_id);
