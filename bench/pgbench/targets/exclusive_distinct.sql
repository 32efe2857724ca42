-- Exclusive pairs on a key per client: what shared readers of one key are compared with.
SELECT dlock_acquire('own-' || :client_id, 'writer-' || :client_id, '30 seconds', '30 seconds');
SELECT dlock_release('own-' || :client_id, 'writer-' || :client_id);
