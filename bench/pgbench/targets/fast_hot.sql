-- One hot fast-mode key, every client waiting.
SELECT dlock_fast_acquire('hot-fast', 'c' || :client_id, '5 seconds', '30 seconds');
SELECT dlock_fast_release('hot-fast', 'c' || :client_id);
