-- The lock table behind SQL functions (bench/peers/naive_table_lock.sql), a new key every time.
\set k random(1, 10000000)
SELECT naive_acquire('n' || :client_id || ':' || :k, 'o' || :client_id, '30 seconds');
SELECT naive_release('n' || :client_id || ':' || :k, 'o' || :client_id);
