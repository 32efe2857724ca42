-- Semaphores: dlock_acquire_shared with max_holders => N grants only while fewer than N owners
-- hold the key shared. Participants must pass the same N (22023 otherwise); N <= 0 is 22023.
\set SHOW_CONTEXT never
-- Not under test here: the once-per-session NOTICE of a first wait without preload.
SET client_min_messages = warning;
\pset null (null)

-- Three permits: three owners are granted, the fourth is refused, at once or after its wait.
SELECT dlock_acquire_shared('sem:a', 'worker-1', '1 minute', max_holders => 3) AS p1 \gset
SELECT dlock_acquire_shared('sem:a', 'worker-2', '1 minute', max_holders => 3) AS p2 \gset
SELECT dlock_acquire_shared('sem:a', 'worker-3', '1 minute', '0 seconds', 3) AS p3 \gset
SELECT :p2 > :p1 AS "p2 > p1", :p3 > :p2 AS "p3 > p2";
SELECT dlock_acquire_shared('sem:a', 'worker-4', '1 minute', max_holders => 3) IS NULL AS fourth_refused;
SELECT dlock_acquire_shared('sem:a', 'worker-4', '1 minute', '200 milliseconds', 3) IS NULL
       AS fourth_timed_out;
SELECT key, owner, mode, max_holders, hold_count FROM dlock_locks ORDER BY owner;

-- A holder's reentry takes no permit: granted while the semaphore is full.
SELECT dlock_acquire_shared('sem:a', 'worker-1', '1 minute', max_holders => 3) = :p1 AS reentered;
SELECT owner, hold_count FROM dlock_locks ORDER BY owner;

-- Participants that disagree on N: 22023, whether the semaphore is full or not, and for a
-- holder's reentry too. A plain shared request (no N) is a disagreement as well.
SELECT dlock_acquire_shared('sem:a', 'worker-4', '1 minute', max_holders => 4);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_shared('sem:a', 'worker-1', '1 minute', max_holders => 2);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_shared('sem:a', 'worker-4', '1 minute');
\echo :LAST_ERROR_SQLSTATE
-- An exclusive request is simply busy.
SELECT dlock_acquire('sem:a', 'worker-4', '1 minute') IS NULL AS exclusive_refused;

-- A release frees a permit (a holder's last hold only): the fourth gets it, with a larger fence.
SELECT dlock_release('sem:a', 'worker-1') AS one_hold_of_two;
SELECT dlock_acquire_shared('sem:a', 'worker-4', '1 minute', max_holders => 3) IS NULL AS still_full;
SELECT dlock_release('sem:a', 'worker-1') AS last_hold;
SELECT dlock_acquire_shared('sem:a', 'worker-4', '1 minute', max_holders => 3) AS p4 \gset
SELECT :p4 > :p3 AS "p4 > p3";
SELECT owner FROM dlock_locks ORDER BY owner;

-- An expired permit is free again.
SELECT dlock_renew('sem:a', 'worker-2', '100 milliseconds') IS NOT NULL AS shortened;
SELECT pg_sleep(0.3);
SELECT owner FROM dlock_locks ORDER BY owner;
SELECT dlock_acquire_shared('sem:a', 'worker-5', '1 minute', max_holders => 3) > :p4 AS granted_after_expiry;
SELECT dlock_release_all(o) AS released
  FROM unnest(ARRAY['worker-3', 'worker-4', 'worker-5']) AS o;

-- Once the last permit is given back, the next holder may pick another N.
SELECT count(*) AS leases FROM dlock_locks WHERE key = 'sem:a';
SELECT dlock_acquire_shared('sem:a', 'worker-1', '1 minute', max_holders => 1) IS NOT NULL AS one_permit;
SELECT dlock_acquire_shared('sem:a', 'worker-2', '1 minute', max_holders => 1) IS NULL AS second_refused;
SELECT owner, max_holders FROM dlock_locks;
SELECT dlock_release('sem:a', 'worker-1') AS released;

-- A semaphore's permits are shared leases: session-bound ones count until their session ends.
SELECT dlock_acquire_shared('sem:s', 'worker-1', NULL, max_holders => 1) AS s1 \gset
SELECT dlock_renew('sem:s', 'worker-1', '1 minute') AS renew_session_bound;
SELECT dlock_acquire_shared('sem:s', 'worker-2', '1 minute', max_holders => 1) IS NULL AS full_while_bound;
SELECT pg_backend_pid() AS old_pid \gset
\c
\set SHOW_CONTEXT never
\pset null (null)
DO $$
BEGIN
  FOR i IN 1..500 LOOP
    EXIT WHEN NOT EXISTS (SELECT 1 FROM dlock_locks WHERE key = 'sem:s');
    PERFORM pg_sleep(0.01);
  END LOOP;
END
$$;
SELECT dlock_acquire_shared('sem:s', 'worker-2', '1 minute', max_holders => 1) > :s1
       AS granted_after_session_end;
SELECT dlock_release('sem:s', 'worker-2') AS released;

-- Inside a transaction: a rolled-back permit is free again.
BEGIN;
SELECT dlock_acquire_shared('sem:t', 'worker-1', '1 minute', max_holders => 1) IS NOT NULL AS granted_in_tx;
ROLLBACK;
SELECT dlock_acquire_shared('sem:t', 'worker-2', '1 minute', max_holders => 1) IS NOT NULL
       AS granted_after_rollback;
SELECT dlock_release('sem:t', 'worker-2') AS released;

-- max_holders must be positive: 0 and negatives are 22023; nothing is held afterwards.
SELECT dlock_acquire_shared('sem:x', 'worker-1', '1 minute', max_holders => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_shared('sem:x', 'worker-1', '1 minute', max_holders => -1);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_shared('sem:x', 'worker-1', '1 minute', max_holders => -2147483648);
\echo :LAST_ERROR_SQLSTATE
-- The largest N is valid.
SELECT dlock_acquire_shared('sem:x', 'worker-1', '1 minute', max_holders => 2147483647) IS NOT NULL
       AS largest_n;
SELECT owner, max_holders FROM dlock_locks;
SELECT dlock_release('sem:x', 'worker-1') AS released;
SELECT count(*) AS leases FROM dlock_locks;
