-- Readers sharing one hot key: each takes it shared and gives it back.
SELECT dlock_acquire_shared('hot-shared', 'reader-' || :client_id, '30 seconds', '30 seconds');
SELECT dlock_release('hot-shared', 'reader-' || :client_id);
