-- dlock's durable pair on a new key every time (a churn of keys), two autocommit statements.
\set k random(1, 10000000)
SELECT dlock_acquire('p' || :client_id || ':' || :k, 'o' || :client_id, '30 seconds');
SELECT dlock_release('p' || :client_id || ':' || :k, 'o' || :client_id);
