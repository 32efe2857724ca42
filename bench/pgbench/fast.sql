-- One acquire+release pair of dlock's fast mode (shared memory, no WAL) on a key of its own.
\set k random(1, 10000000)
SELECT dlock_fast_acquire('c' || :client_id::text || ':' || :k::text, 'bench-' || :client_id::text, '30 seconds');
SELECT dlock_fast_release('c' || :client_id::text || ':' || :k::text, 'bench-' || :client_id::text);
