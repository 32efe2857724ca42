-- Acquire, reentrancy, try-by-another-owner, release, release_all, holds, transactions.
-- Fences are never printed raw: only compared with each other.

-- A free key is granted with a fence > 0.
SELECT dlock_acquire('job:a', 'owner-1', '1 minute') AS f1 \gset
SELECT :f1 > 0 AS fence_positive;
SELECT key, owner, fence = :f1 AS same_fence, hold_count, waiters,
       holder_pid = pg_backend_pid() AS held_by_me, holder_role,
       acquired_at <= now() AS acquired_before_now,
       expires_at > now() + interval '50 seconds' AS expires_in_about_a_minute,
       expires_at <= now() + interval '1 minute' AS not_later
  FROM dlock_locks;

-- The same owner again: reentrant, the same fence, hold_count 2.
SELECT dlock_acquire('job:a', 'owner-1', '1 minute') = :f1 AS same_fence;
SELECT key, owner, hold_count FROM dlock_locks;

-- Another owner, wait 0 (the default): NULL at once, nothing changes.
SELECT dlock_acquire('job:a', 'owner-2', '1 minute') IS NULL AS refused;
SELECT dlock_acquire('job:a', 'owner-2', '1 minute', '0 seconds') IS NULL AS refused_explicit_wait_0;
SELECT key, owner, fence = :f1 AS same_fence, hold_count FROM dlock_locks;

-- dlock_holds: true only for the live fence of the key.
SELECT dlock_holds('job:a', :f1) AS live_fence,
       dlock_holds('job:a', :f1 + 1) AS other_fence,
       dlock_holds('job:unknown', :f1) AS unknown_key;

-- Release: only the owner; one hold at a time; false once the key is free.
SELECT dlock_release('job:a', 'owner-2') AS other_owner;
SELECT dlock_release('job:a', 'owner-1') AS first_release;
SELECT key, owner, hold_count FROM dlock_locks;
SELECT dlock_release('job:a', 'owner-1') AS second_release;
SELECT count(*) AS leases FROM dlock_locks;
SELECT dlock_release('job:a', 'owner-1') AS third_release;
SELECT dlock_release('job:never', 'owner-1') AS unknown_key;
SELECT dlock_holds('job:a', :f1) AS old_fence_after_release;

-- The next grant of the key carries a larger fence, whoever takes it.
SELECT dlock_acquire('job:a', 'owner-2', '1 minute') AS f2 \gset
SELECT :f2 > :f1 AS "f2 > f1";
SELECT dlock_release('job:a', 'owner-2') AS released;
SELECT dlock_acquire('job:a', 'owner-1', '1 minute') AS f3 \gset
SELECT :f3 > :f2 AS "f3 > f2";
SELECT dlock_release('job:a', 'owner-1') AS released;

-- release_all: every key of the owner, all holds; the answer counts keys.
SELECT dlock_acquire('job:x', 'owner-1', '1 minute') IS NOT NULL AS x,
       dlock_acquire('job:y', 'owner-1', '1 minute') IS NOT NULL AS y,
       dlock_acquire('job:y', 'owner-1', '1 minute') IS NOT NULL AS y_again,
       dlock_acquire('job:z', 'owner-1', NULL) IS NOT NULL AS z_session_bound,
       dlock_acquire('job:w', 'owner-2', '1 minute') IS NOT NULL AS w_other_owner;
SELECT key, owner, hold_count FROM dlock_locks ORDER BY key;
SELECT dlock_release_all('owner-1') AS keys_released;
SELECT key, owner, hold_count FROM dlock_locks ORDER BY key;
SELECT dlock_release_all('owner-1') AS keys_released_again;
SELECT dlock_release_all('owner-2') AS keys_released_other;
SELECT dlock_release_all('owner-nobody') AS keys_released_unknown;
SELECT count(*) AS leases FROM dlock_locks;

-- Keys and owners are compared exactly: case, spaces and multibyte text are distinct keys.
SELECT dlock_acquire('Job:A', 'owner-1', '1 minute') IS NOT NULL AS upper,
       dlock_acquire('job:a', 'owner-2', '1 minute') IS NOT NULL AS lower,
       dlock_acquire('job:a ', 'owner-3', '1 minute') IS NOT NULL AS trailing_space,
       dlock_acquire('jöb:ä', 'owner-4', '1 minute') IS NOT NULL AS multibyte,
       dlock_acquire('job:a', 'OWNER-2', '1 minute') IS NULL AS owner_case_matters;
SELECT format('%L', key) AS key, owner FROM dlock_locks ORDER BY key COLLATE "C";
SELECT dlock_release('Job:A', 'owner-1') AND dlock_release('job:a', 'owner-2')
       AND dlock_release('job:a ', 'owner-3') AND dlock_release('jöb:ä', 'owner-4') AS all_released;

-- Transactions: a rolled-back grant never happened; a rolled-back release is undone.
BEGIN;
SELECT dlock_acquire('tx:a', 'owner-1', '1 minute') IS NOT NULL AS granted_in_tx;
SELECT key, owner, hold_count FROM dlock_locks;
ROLLBACK;
SELECT count(*) AS leases_after_rollback FROM dlock_locks;
SELECT dlock_acquire('tx:a', 'owner-1', '1 minute') AS f_tx \gset
BEGIN;
SELECT dlock_release('tx:a', 'owner-1') AS released_in_tx;
ROLLBACK;
SELECT key, owner, fence = :f_tx AS same_fence, hold_count FROM dlock_locks;
BEGIN;
SELECT dlock_release('tx:a', 'owner-1') AS released_in_tx;
COMMIT;
SELECT count(*) AS leases_after_commit FROM dlock_locks;

-- A wait on a free key is granted at once.
SELECT dlock_acquire('wait:free', 'owner-1', '1 minute', '5 seconds') IS NOT NULL AS granted,
       clock_timestamp() - statement_timestamp() < interval '1 second' AS at_once;
-- A wait on a key held by another owner ends with NULL when the wait runs out.
SELECT dlock_acquire('wait:free', 'owner-2', '1 minute', '300 milliseconds') IS NULL AS timed_out,
       clock_timestamp() - statement_timestamp() >= interval '300 milliseconds' AS waited_the_wait;
-- The reentrant grant does not wait.
SELECT dlock_acquire('wait:free', 'owner-1', '1 minute', NULL) IS NOT NULL AS reentrant_no_wait;
SELECT key, owner, hold_count, waiters FROM dlock_locks;
SELECT dlock_release_all('owner-1') AS keys_released;
