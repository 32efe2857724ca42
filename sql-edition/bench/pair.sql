-- The uncontended durable pair on the client's own key (bench/pgbench/targets/dlock_pair.sql).
SELECT dlock_acquire('p' || :client_id, 'o' || :client_id, '30 seconds');
SELECT dlock_release('p' || :client_id, 'o' || :client_id);
