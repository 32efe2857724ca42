-- Shared leases (read-write locks): any number of owners hold a key shared, never beside an
-- exclusive lease; each shared lease is a lease of its own (fence, ttl, renew, release,
-- reentry, expiry, session binding). Asking in the other mode than one holds is 0A000.
-- Fences are never printed raw: only compared with each other.
\set SHOW_CONTEXT never
-- Not under test here: the once-per-session NOTICE of a first wait without preload.
SET client_min_messages = warning;

-- Two readers side by side, each with a fence of its own, the second larger.
SELECT dlock_acquire_shared('rw:a', 'reader-1', '1 minute') AS r1 \gset
SELECT dlock_acquire_shared('rw:a', 'reader-2', '1 minute') AS r2 \gset
SELECT :r1 > 0 AS fence_positive, :r2 > :r1 AS "r2 > r1";
SELECT key, owner, mode, max_holders, hold_count, waiters,
       fence = CASE owner WHEN 'reader-1' THEN :r1 ELSE :r2 END AS own_fence,
       expires_at > now() + interval '50 seconds' AS ttl_about_a_minute
  FROM dlock_locks ORDER BY owner;

-- A writer cannot join them, with or without a short wait.
SELECT dlock_acquire('rw:a', 'writer', '1 minute') IS NULL AS writer_refused;
SELECT dlock_acquire('rw:a', 'writer', '1 minute', '200 milliseconds') IS NULL AS writer_timed_out;

-- Reentry: the same owner gets the same fence, one hold more; the other reader is untouched.
SELECT dlock_acquire_shared('rw:a', 'reader-1', '1 minute') = :r1 AS same_fence;
SELECT owner, hold_count FROM dlock_locks ORDER BY owner;

-- dlock_holds is true for every live shared lease's fence.
SELECT dlock_holds('rw:a', :r1) AS r1_holds, dlock_holds('rw:a', :r2) AS r2_holds,
       dlock_holds('rw:a', :r2 + 1000) AS unknown_fence;

-- Asking for the key in the other mode: 0A000, for the holder and nothing else changes.
SELECT dlock_acquire('rw:a', 'reader-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('rw:a', 'reader-2', '1 minute', '1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_all(ARRAY['rw:a', 'rw:other'], 'reader-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_campaign('rw:a', 'reader-1', '1 minute', wait => '0');
\echo :LAST_ERROR_SQLSTATE
SELECT owner, mode, hold_count FROM dlock_locks ORDER BY owner;

-- Each lease renews on its own.
SELECT dlock_renew('rw:a', 'reader-2', '1 hour') > now() + interval '59 minutes' AS r2_renewed;
SELECT owner, expires_at > now() + interval '59 minutes' AS renewed_an_hour
  FROM dlock_locks ORDER BY owner;
SELECT dlock_renew('rw:a', 'writer', '1 hour') IS NULL AS stranger_renew;

-- Each lease releases on its own: reader-1 twice (two holds), reader-2 once.
SELECT dlock_release('rw:a', 'reader-1') AS released_one_hold;
SELECT dlock_release('rw:a', 'writer') AS stranger_release;
SELECT dlock_release('rw:a', 'reader-1') AS reader_1_gone;
SELECT owner, hold_count FROM dlock_locks;
SELECT dlock_holds('rw:a', :r1) AS r1_after_release, dlock_holds('rw:a', :r2) AS r2_still;
SELECT dlock_acquire('rw:a', 'writer', '1 minute') IS NULL AS writer_still_refused;
SELECT dlock_release('rw:a', 'reader-2') AS reader_2_gone;

-- The key is free: the writer gets it with a larger fence, and then readers are refused.
SELECT dlock_acquire('rw:a', 'writer', '1 minute') AS w \gset
SELECT :w > :r2 AS "w > r2";
SELECT dlock_acquire_shared('rw:a', 'reader-3', '1 minute') IS NULL AS reader_refused;
SELECT dlock_acquire_shared('rw:a', 'reader-3', '1 minute', '200 milliseconds') IS NULL
       AS reader_timed_out;
-- The writer asking for it shared is the mode conflict the other way round.
SELECT dlock_acquire_shared('rw:a', 'writer', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT key, owner, mode, hold_count FROM dlock_locks;
SELECT dlock_release('rw:a', 'writer') AS released;
-- The next reader's fence is larger than the writer's.
SELECT dlock_acquire_shared('rw:a', 'reader-3', '1 minute') > :w AS next_fence_larger;
SELECT dlock_release('rw:a', 'reader-3') AS released;

-- Session-bound shared leases (ttl NULL): expires_at infinity, renew answers infinity; they
-- end with their session.
SELECT dlock_acquire_shared('rw:s', 'reader-1', NULL) AS s1 \gset
SELECT dlock_acquire_shared('rw:s', 'reader-2', '1 minute') AS s2 \gset
SELECT owner, mode, expires_at FROM dlock_locks WHERE key = 'rw:s' AND expires_at = 'infinity';
SELECT dlock_renew('rw:s', 'reader-1', '1 minute') AS renew_session_bound;
SELECT pg_backend_pid() AS old_pid \gset
\c
SELECT pg_backend_pid() <> :old_pid AS new_session;
DO $$
BEGIN
  FOR i IN 1..500 LOOP
    EXIT WHEN NOT EXISTS (SELECT 1 FROM dlock_locks WHERE key = 'rw:s' AND owner = 'reader-1');
    PERFORM pg_sleep(0.01);
  END LOOP;
END
$$;
-- The TTL reader stays; the session-bound one is gone.
SELECT owner, fence = :s2 AS same_fence FROM dlock_locks WHERE key = 'rw:s';
SELECT dlock_holds('rw:s', :s1) AS s1_after_session_end, dlock_holds('rw:s', :s2) AS s2_holds;
SELECT dlock_release('rw:s', 'reader-2') AS released;

-- Expiry: a shared lease ends at its ttl by itself; another reader is not affected.
SELECT dlock_acquire_shared('rw:e', 'reader-1', '100 milliseconds') AS e1 \gset
SELECT dlock_acquire_shared('rw:e', 'reader-2', '1 minute') AS e2 \gset
SELECT pg_sleep(0.3);
SELECT owner FROM dlock_locks WHERE key = 'rw:e';
SELECT dlock_holds('rw:e', :e1) AS expired_fence, dlock_renew('rw:e', 'reader-1', '1 minute') IS NULL
       AS renew_after_expiry;
-- The expired reader comes back as a new lease with a larger fence.
SELECT dlock_acquire_shared('rw:e', 'reader-1', '1 minute') > :e2 AS new_fence_larger;
-- release_all frees shared leases as well.
SELECT dlock_release_all('reader-1') AS keys_released_1, dlock_release_all('reader-2') AS keys_released_2;
SELECT count(*) AS leases FROM dlock_locks;

-- Transactions: a rolled-back shared grant never happened; a rolled-back release is undone.
BEGIN;
SELECT dlock_acquire_shared('rw:t', 'reader-1', '1 minute') IS NOT NULL AS granted_in_tx;
SELECT owner, mode FROM dlock_locks;
ROLLBACK;
SELECT count(*) AS leases_after_rollback FROM dlock_locks;
SELECT dlock_acquire_shared('rw:t', 'reader-1', '1 minute') AS t1 \gset
BEGIN;
SELECT dlock_release('rw:t', 'reader-1') AS released_in_tx;
SELECT count(*) AS leases_in_tx FROM dlock_locks;
ROLLBACK;
SELECT owner, fence = :t1 AS same_fence, hold_count FROM dlock_locks;
SELECT dlock_release('rw:t', 'reader-1') AS released;

-- Roles: a shared lease belongs to its role. Another role presenting the same owner string is
-- not a reentry (the owner's lease is not its own, so the key counts as busy for it), may not
-- renew or release it (42501), and with an owner string of its own reads beside it.
CREATE ROLE regress_reader;
SELECT dlock_acquire_shared('rw:r', 'reader-1', '1 minute') AS rr \gset
SET ROLE regress_reader;
SELECT dlock_acquire_shared('rw:r', 'reader-1', '1 minute') IS NULL AS same_owner_other_role;
SELECT dlock_release('rw:r', 'reader-1');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_shared('rw:r', 'reader-9', '1 minute') > :rr AS own_owner_granted_beside;
SELECT key, owner, mode FROM dlock_locks ORDER BY owner NULLS LAST;
SELECT dlock_release('rw:r', 'reader-9') AS released;
RESET ROLE;
SELECT dlock_release('rw:r', 'reader-1') AS released;
DROP ROLE regress_reader;

-- Bad input: NULL key or owner 22004, a bad ttl or wait 22023; nothing is held afterwards.
SELECT dlock_acquire_shared(NULL, 'reader-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_shared('rw:x', NULL, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_shared('rw:x', 'reader-1', '0 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_shared('rw:x', 'reader-1', '1 minute', '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS leases FROM dlock_locks;
