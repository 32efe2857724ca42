-- The same lock table behind SQL functions (bench/peers/naive_table_lock.sql), on the client's
-- own key.
SELECT naive_acquire('n' || :client_id, 'o' || :client_id, '30 seconds');
SELECT naive_release('n' || :client_id, 'o' || :client_id);
