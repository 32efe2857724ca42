-- One acquire+release pair on a key of its own, two autocommit statements, like an application.
\set k random(1, 10000000)
SELECT dlock_acquire('c' || :client_id::text || ':' || :k::text, 'bench-' || :client_id::text, '30 seconds');
SELECT dlock_release('c' || :client_id::text || ':' || :k::text, 'bench-' || :client_id::text);
