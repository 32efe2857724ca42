-- Bad input: every row of the contract's table. Each error shows its message (and hint) and
-- then its SQLSTATE; nothing changes on any of them.
\set SHOW_CONTEXT never
-- A live lease the bad calls below aim at: it must come out of them unchanged.
SELECT dlock_acquire('err:k', 'owner-1', '1 hour') AS f \gset

-- key or owner NULL: 22004.
SELECT dlock_acquire(NULL, 'owner-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('err:k', NULL, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew(NULL, 'owner-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('err:k', NULL, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release(NULL, 'owner-1');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release('err:k', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release_all(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_holds(NULL, :f);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_force_release(NULL);
\echo :LAST_ERROR_SQLSTATE

-- renew with ttl NULL: 22004 (a lease cannot be turned session-bound by renewing it).
SELECT dlock_renew('err:k', 'owner-1', NULL);
\echo :LAST_ERROR_SQLSTATE

-- key empty or longer than 1024 bytes: 22023.
SELECT dlock_acquire('', 'owner-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire(repeat('k', 1025), 'owner-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
-- The limit is bytes, not characters: 513 two-byte characters are 1026 bytes.
SELECT dlock_acquire(repeat('é', 513), 'owner-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('', 'owner-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release(repeat('k', 1025), 'owner-1');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_holds('', :f);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_force_release('');
\echo :LAST_ERROR_SQLSTATE
-- Exactly 1024 bytes is a valid key.
SELECT dlock_acquire(repeat('k', 1024), 'owner-1', '1 minute') IS NOT NULL AS key_1024_bytes;
SELECT dlock_release(repeat('k', 1024), 'owner-1') AS released;

-- owner empty or longer than 256 bytes: 22023.
SELECT dlock_acquire('err:k', '', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('err:k', repeat('o', 257), '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('err:k', '', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release('err:k', repeat('o', 257));
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release_all('');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release_all(repeat('é', 129));
\echo :LAST_ERROR_SQLSTATE
-- Exactly 256 bytes is a valid owner.
SELECT dlock_acquire('err:owner256', repeat('o', 256), '1 minute') IS NOT NULL AS owner_256_bytes;
SELECT dlock_release('err:owner256', repeat('o', 256)) AS released;

-- ttl <= 0 or > dlock.max_ttl (default 1 day): 22023, for acquire and renew.
SELECT dlock_acquire('err:k', 'owner-1', '0 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('err:k', 'owner-1', '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('err:k', 'owner-1', '1 day 1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('err:k', 'owner-1', '1 month');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('err:k', 'owner-1', '0 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('err:k', 'owner-1', '-1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('err:k', 'owner-1', '1 day 1 second');
\echo :LAST_ERROR_SQLSTATE
-- Exactly dlock.max_ttl is valid.
SELECT dlock_acquire('err:max', 'owner-1', '1 day') IS NOT NULL AS ttl_max;
SELECT dlock_renew('err:max', 'owner-1', '24 hours') > now() AS renewed_max;
SELECT dlock_release('err:max', 'owner-1') AS released;

-- wait < 0: 22023.
SELECT dlock_acquire('err:k', 'owner-2', '1 minute', '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('err:k', 'owner-2', '1 minute', '-1 microsecond');
\echo :LAST_ERROR_SQLSTATE

-- A bad call fails even when the key is busy or the call would be a no-op: checks come first.
SELECT dlock_acquire('err:k', 'owner-2', '0 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('err:unknown', 'owner-1', '-1 second');
\echo :LAST_ERROR_SQLSTATE

-- A waiting call ended by statement_timeout: 57014, and the waiter leaves no trace.
SET statement_timeout = '300ms';
SELECT dlock_acquire('err:k', 'owner-2', '1 minute', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('err:k', 'owner-2', '1 minute', '1 hour');
\echo :LAST_ERROR_SQLSTATE
RESET statement_timeout;
SELECT key, waiters FROM dlock_locks WHERE key = 'err:k';
-- The same waits inside a transaction: the transaction is aborted, the lease untouched.
BEGIN;
SET LOCAL statement_timeout = '300ms';
SELECT dlock_acquire('err:k', 'owner-2', '1 minute', NULL);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

-- A session that routes with a shard map (a sharded client sets dlock.shard_epoch) on a server
-- that has none: it may not know that it lost a key, so it grants and renews nothing: 0F000.
SET dlock.shard_epoch = 3;
SELECT dlock_acquire('err:shard', 'owner-2', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT fence FROM dlock_try_acquire('err:shard', 'owner-2', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_all(ARRAY['err:shard'], 'owner-2', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('err:k', 'owner-1', '2 hours');
\echo :LAST_ERROR_SQLSTATE
RESET dlock.shard_epoch;

-- Nothing changed: the one lease, its fence, hold count and ttl as they were.
SELECT key, owner, fence = :f AS same_fence, hold_count, waiters,
       expires_at > now() + interval '59 minutes' AS ttl_untouched
  FROM dlock_locks ORDER BY key;
SELECT dlock_release('err:k', 'owner-1') AS released;
SELECT count(*) AS leases FROM dlock_locks;
