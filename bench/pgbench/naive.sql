-- One acquire+release pair with the hand-written lock table (bench/peers/naive_table_lock.sql).
\set k random(1, 10000000)
SELECT naive_acquire('c' || :client_id::text || ':' || :k::text, 'bench-' || :client_id::text, '30 seconds');
SELECT naive_release('c' || :client_id::text || ':' || :k::text, 'bench-' || :client_id::text);
