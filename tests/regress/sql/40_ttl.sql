-- Time: expires_at = now + ttl on the server's clock; expiry; renew; session-bound leases;
-- the dlock.max_ttl setting.
\set SHOW_CONTEXT never

-- expires_at is the server's clock at the grant plus the ttl.
SELECT clock_timestamp() AS t0 \gset
SELECT dlock_acquire('ttl:a', 'owner-1', '1 second') AS f1 \gset
SELECT clock_timestamp() AS t1 \gset
SELECT expires_at BETWEEN :'t0'::timestamptz + interval '1 second'
                      AND :'t1'::timestamptz + interval '1 second' AS expires_at_is_grant_plus_ttl,
       acquired_at BETWEEN :'t0'::timestamptz AND :'t1'::timestamptz AS acquired_at_is_grant
  FROM dlock_locks WHERE key = 'ttl:a';

-- Expiry: after the ttl nobody holds the key; the old owner's renew/release answer NULL/false.
SELECT pg_sleep(1.2);
SELECT count(*) AS live_leases FROM dlock_locks;
SELECT dlock_holds('ttl:a', :f1) AS old_fence_holds;
SELECT dlock_renew('ttl:a', 'owner-1', '1 minute') IS NULL AS renew_after_expiry;
SELECT dlock_release('ttl:a', 'owner-1') AS release_after_expiry;
-- The next acquirer, even the same owner, gets the key with a new, larger fence.
SELECT dlock_acquire('ttl:a', 'owner-2', '1 minute') AS f2 \gset
SELECT :f2 > :f1 AS "f2 > f1";
SELECT key, owner, hold_count FROM dlock_locks;
SELECT dlock_release('ttl:a', 'owner-2') AS released;
SELECT dlock_acquire('ttl:b', 'owner-1', '100 milliseconds') AS g1 \gset
SELECT pg_sleep(0.3);
SELECT dlock_acquire('ttl:b', 'owner-1', '1 minute') AS g2 \gset
SELECT :g2 > :g1 AS same_owner_after_expiry_new_fence;
SELECT key, owner, hold_count FROM dlock_locks;
SELECT dlock_release('ttl:b', 'owner-1') AS released;

-- Renew sets expires_at = now + ttl (longer or shorter) and returns it; fence and holds stay.
SELECT dlock_acquire('ttl:r', 'owner-1', '10 seconds') AS r \gset
SELECT dlock_acquire('ttl:r', 'owner-1', '10 seconds') = :r AS reentrant;
SELECT dlock_renew('ttl:r', 'owner-1', '1 hour') AS renewed_until \gset
SELECT :'renewed_until'::timestamptz > now() + interval '59 minutes' AS renewed_an_hour,
       expires_at = :'renewed_until'::timestamptz AS view_agrees,
       fence = :r AS same_fence, hold_count
  FROM dlock_locks WHERE key = 'ttl:r';
SELECT dlock_renew('ttl:r', 'owner-1', '5 seconds') < now() + interval '6 seconds' AS renew_can_shorten;
SELECT dlock_renew('ttl:r', 'owner-2', '1 hour') IS NULL AS other_owner_renew;
SELECT dlock_renew('ttl:unknown', 'owner-1', '1 hour') IS NULL AS unknown_key_renew;
-- A reentrant acquire never shortens: expires_at = greatest(old, now + ttl).
SELECT dlock_renew('ttl:r', 'owner-1', '1 hour') IS NOT NULL AS renewed;
SELECT dlock_acquire('ttl:r', 'owner-1', '1 second') = :r AS reentrant_short_ttl;
SELECT expires_at > now() + interval '59 minutes' AS not_shortened, hold_count
  FROM dlock_locks WHERE key = 'ttl:r';
SELECT dlock_acquire('ttl:r', 'owner-1', '2 hours') = :r AS reentrant_long_ttl;
SELECT expires_at > now() + interval '119 minutes' AS lengthened, hold_count
  FROM dlock_locks WHERE key = 'ttl:r';
SELECT dlock_release_all('owner-1') AS keys_released;

-- Session-bound (ttl NULL): never expires; renew answers infinity.
SELECT dlock_acquire('ttl:s', 'owner-1', NULL) AS s \gset
SELECT key, owner, hold_count, expires_at FROM dlock_locks;
SELECT dlock_renew('ttl:s', 'owner-1', '1 minute') AS renew_session_bound;
SELECT key, owner, hold_count, expires_at FROM dlock_locks;
SELECT dlock_holds('ttl:s', :s) AS holds;
-- Reentrant with a ttl keeps it session-bound.
SELECT dlock_acquire('ttl:s', 'owner-1', '1 minute') = :s AS reentrant;
SELECT key, hold_count, expires_at FROM dlock_locks;
-- It ends when its session ends.
SELECT pg_backend_pid() AS old_pid \gset
\c
SELECT pg_backend_pid() <> :old_pid AS new_session;
DO $$
BEGIN
  FOR i IN 1..500 LOOP
    EXIT WHEN NOT EXISTS (SELECT 1 FROM dlock_locks WHERE key = 'ttl:s');
    PERFORM pg_sleep(0.01);
  END LOOP;
END
$$;
SELECT count(*) AS leases_after_session_end FROM dlock_locks;
SELECT dlock_holds('ttl:s', :s) AS old_fence_holds;
SELECT dlock_acquire('ttl:s', 'owner-2', '1 minute') > :s AS next_fence_larger;
SELECT dlock_release('ttl:s', 'owner-2') AS released;

-- dlock.max_ttl: default one day; a superuser may change it, in units of time.
SHOW dlock.max_ttl;
SET dlock.max_ttl = '10s';
SHOW dlock.max_ttl;
SELECT dlock_acquire('ttl:m', 'owner-1', '10 seconds') IS NOT NULL AS ttl_at_max;
SELECT dlock_acquire('ttl:m', 'owner-1', '11 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('ttl:m', 'owner-1', '11 seconds');
\echo :LAST_ERROR_SQLSTATE
SET dlock.max_ttl = '2d';
SELECT dlock_acquire('ttl:m', 'owner-1', '36 hours') IS NOT NULL AS ttl_36h_under_2d;
SET dlock.max_ttl = 3600;
SHOW dlock.max_ttl;
RESET dlock.max_ttl;
SHOW dlock.max_ttl;
SELECT dlock_release_all('owner-1') AS keys_released;
-- A role that is not a superuser may not change it.
CREATE ROLE regress_carol;
SET ROLE regress_carol;
SET dlock.max_ttl = '2d';
\echo :LAST_ERROR_SQLSTATE
SHOW dlock.max_ttl;
SELECT dlock_acquire('ttl:c', 'carol-1', '36 hours');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- Nor in a new session before dlock is loaded, where SET only makes a placeholder: the value is
-- refused (with a WARNING) when the library loads.
ALTER ROLE regress_carol LOGIN;
\c - regress_carol
SET dlock.max_ttl = '2d';
SELECT dlock_acquire('ttl:c', 'carol-1', '36 hours');
\echo :LAST_ERROR_SQLSTATE
SHOW dlock.max_ttl;
\c - postgres
DROP ROLE regress_carol;
-- dlock.max_ttl is an interval: any interval syntax PostgreSQL accepts, positive only.
SET dlock.max_ttl = '36 hours';
SHOW dlock.max_ttl;
SELECT dlock_acquire('ttl:i', 'owner-1', '1 day 11 hours') IS NOT NULL AS ttl_35h_under_36h;
SELECT dlock_acquire('ttl:j', 'owner-1', '1 day 13 hours');
\echo :LAST_ERROR_SQLSTATE
SET dlock.max_ttl = 'P2DT1H';
SHOW dlock.max_ttl;
SET dlock.max_ttl = 'a fortnight';
\echo :LAST_ERROR_SQLSTATE
SET dlock.max_ttl = '-1 day';
\echo :LAST_ERROR_SQLSTATE
SET dlock.max_ttl = '0';
\echo :LAST_ERROR_SQLSTATE
SHOW dlock.max_ttl;
RESET dlock.max_ttl;
SELECT dlock_release_all('owner-1') AS keys_released;
