-- Multi-key locks: dlock_acquire_all takes every key exclusively, or none. The fences come
-- back in the order of the keys given; NULL when not all could be had within the wait, and
-- then no key is held. At most 64 keys; duplicates, NULL elements or an empty array are
-- refused (22023 / 22004).
\set SHOW_CONTEXT never
-- Not under test here: the once-per-session NOTICE of a first wait without preload.
SET client_min_messages = warning;
\pset null (null)

-- Three free keys: three fences, in the caller's order, each that key's lease.
SELECT dlock_acquire_all(ARRAY['m:c', 'm:a', 'm:b'], 'owner-1', '1 minute') AS fences \gset
SELECT cardinality(:'fences'::bigint[]) AS n_fences;
SELECT key, owner, mode, hold_count,
       fence = (:'fences'::bigint[])[array_position(ARRAY['m:c', 'm:a', 'm:b'], key)] AS fence_in_key_order
  FROM dlock_locks ORDER BY key;
SELECT bool_and(dlock_holds(k, f)) AS every_fence_holds
  FROM unnest(ARRAY['m:c', 'm:a', 'm:b'], :'fences'::bigint[]) AS u(k, f);

-- Again by the same owner: reentry on every key, the same fences, two holds each; in any order.
SELECT dlock_acquire_all(ARRAY['m:b', 'm:c', 'm:a'], 'owner-1', '1 minute')
       = ARRAY[(:'fences'::bigint[])[3], (:'fences'::bigint[])[1], (:'fences'::bigint[])[2]] AS same_fences;
SELECT key, hold_count FROM dlock_locks ORDER BY key;

-- Another owner wants one of them and a free key: NULL, and it holds neither (no subset).
SELECT dlock_acquire_all(ARRAY['m:free', 'm:b'], 'owner-2', '1 minute') IS NULL AS refused;
SELECT dlock_acquire_all(ARRAY['m:free', 'm:b'], 'owner-2', '1 minute', '200 milliseconds') IS NULL
       AS timed_out;
SELECT key, owner FROM dlock_locks ORDER BY key;
SELECT dlock_acquire('m:free', 'owner-3', '1 minute') IS NOT NULL AS free_key_still_free;
SELECT dlock_release('m:free', 'owner-3') AS released;

-- Keys are released one by one, with dlock_release, or all with dlock_release_all.
SELECT dlock_release('m:a', 'owner-1') AND dlock_release('m:a', 'owner-1') AS a_released;
SELECT key, hold_count FROM dlock_locks ORDER BY key;
SELECT dlock_release_all('owner-1') AS keys_released;
SELECT count(*) AS leases FROM dlock_locks;

-- A key that becomes free lets the whole set be granted; every fence is larger than before.
SELECT dlock_acquire_all(ARRAY['m:a', 'm:b', 'm:c'], 'owner-2', '1 minute') AS fences2 \gset
SELECT bool_and(f2 > f1) AS every_fence_larger
  FROM unnest(ARRAY[(:'fences'::bigint[])[2], (:'fences'::bigint[])[3], (:'fences'::bigint[])[1]],
              :'fences2'::bigint[]) AS u(f1, f2);
SELECT dlock_release_all('owner-2') AS keys_released;

-- A key held shared by others, or as an election's lead, is busy for the set too.
SELECT dlock_acquire_shared('m:s', 'reader', '1 minute') IS NOT NULL AS shared_held;
SELECT dlock_acquire_all(ARRAY['m:a', 'm:s'], 'owner-1', '1 minute') IS NULL AS busy_with_a_reader;
SELECT dlock_campaign('m:e', 'leader', '1 minute', wait => '0') IS NOT NULL AS led;
SELECT dlock_acquire_all(ARRAY['m:a', 'm:e'], 'owner-1', '1 minute') IS NULL AS busy_with_a_leader;
SELECT key, mode FROM dlock_locks ORDER BY key;
SELECT dlock_release('m:s', 'reader') AND dlock_release('m:e', 'leader') AS released;

-- Session-bound (ttl NULL): every key ends with the session.
SELECT dlock_acquire_all(ARRAY['m:x', 'm:y'], 'owner-1', NULL) IS NOT NULL AS granted;
SELECT key, expires_at FROM dlock_locks ORDER BY key;
SELECT pg_backend_pid() AS old_pid \gset
\c
\set SHOW_CONTEXT never
\pset null (null)
DO $$
BEGIN
  FOR i IN 1..500 LOOP
    EXIT WHEN NOT EXISTS (SELECT 1 FROM dlock_locks WHERE key IN ('m:x', 'm:y'));
    PERFORM pg_sleep(0.01);
  END LOOP;
END
$$;
SELECT count(*) AS leases_after_session_end FROM dlock_locks;

-- Transactions: a rolled-back set never happened.
BEGIN;
SELECT cardinality(dlock_acquire_all(ARRAY['m:t1', 'm:t2'], 'owner-1', '1 minute')) AS granted_in_tx;
SELECT count(*) AS leases_in_tx FROM dlock_locks;
ROLLBACK;
SELECT count(*) AS leases_after_rollback FROM dlock_locks;

-- One key is a set of one; 64 keys are allowed.
SELECT cardinality(dlock_acquire_all(ARRAY['m:one'], 'owner-1', '1 minute')) AS one_key;
SELECT cardinality(dlock_acquire_all(array_agg('m:many:' || i), 'owner-2', '1 minute')) AS sixty_four_keys
  FROM generate_series(1, 64) AS i;
SELECT count(*) AS leases FROM dlock_locks;
SELECT dlock_release_all('owner-1') AS released_1, dlock_release_all('owner-2') AS released_2;

-- Bad input, each refused before anything is taken.
-- 65 keys: 22023.
SELECT dlock_acquire_all(array_agg('m:many:' || i), 'owner-1', '1 minute')
  FROM generate_series(1, 65) AS i;
\echo :LAST_ERROR_SQLSTATE
-- An empty array: 22023.
SELECT dlock_acquire_all(ARRAY[]::text[], 'owner-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
-- A key given twice: 22023.
SELECT dlock_acquire_all(ARRAY['m:a', 'm:b', 'm:a'], 'owner-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
-- A NULL element, a NULL array: 22004.
SELECT dlock_acquire_all(ARRAY['m:a', NULL], 'owner-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_all(NULL, 'owner-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
-- An empty key: 22023.
SELECT dlock_acquire_all(ARRAY['m:a', ''], 'owner-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
-- A two-dimensional array: 22023.
SELECT dlock_acquire_all(ARRAY[['m:a', 'm:b'], ['m:c', 'm:d']], 'owner-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
-- NULL owner 22004; bad ttl and wait 22023.
SELECT dlock_acquire_all(ARRAY['m:a'], NULL, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_all(ARRAY['m:a'], 'owner-1', '0 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_all(ARRAY['m:a'], 'owner-1', '1 minute', '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS leases FROM dlock_locks;
