-- Lock-delay (Chubby, Consul): a lease that ends by expiring, not by release, keeps its key
-- from new grants for the delay chosen when it was taken, so that a paused holder's in-flight
-- writes drain before the next holder starts. Per lease, default 0; shown in dlock_locks; for
-- exclusive and shared leases, multi-key locks and elections.
\set SHOW_CONTEXT never
-- Not under test here: the once-per-session NOTICE of a first wait without preload.
SET client_min_messages = warning;
\pset null (null)

-- The default is no delay, shown as 0; the five-argument dlock_acquire sets one.
SELECT dlock_acquire('ld:none', 'owner-1', '1 minute') IS NOT NULL AS granted;
SELECT dlock_acquire('ld:a', 'owner-1', '1 minute', '0', '2 seconds') AS f1 \gset
SELECT key, lock_delay FROM dlock_locks ORDER BY key;
SELECT dlock_release('ld:none', 'owner-1') AS released;

-- Released, not expired: no delay, the next owner is granted at once with a larger fence.
SELECT dlock_release('ld:a', 'owner-1') AS released;
SELECT dlock_acquire('ld:a', 'owner-2', '1 minute') > :f1 AS granted_at_once;
SELECT dlock_release('ld:a', 'owner-2') AS released;

-- Expired: the key is held back for the delay after the expiry.
SELECT dlock_acquire('ld:a', 'owner-1', '100 milliseconds', '0', '2 seconds') AS f2 \gset
SELECT pg_sleep(0.3);
-- The lease is over: it is not shown, its fence no longer holds, its owner cannot renew it.
SELECT count(*) AS live_leases FROM dlock_locks;
SELECT dlock_holds('ld:a', :f2) AS expired_fence_holds,
       dlock_renew('ld:a', 'owner-1', '1 minute') IS NULL AS renew_refused;
-- Yet nobody gets the key during the delay: exclusive, shared, all-or-nothing, campaign; not
-- even the expired lease's owner.
SELECT dlock_acquire('ld:a', 'owner-2', '1 minute') IS NULL AS exclusive_held_back,
       dlock_acquire('ld:a', 'owner-1', '1 minute') IS NULL AS old_owner_held_back,
       dlock_acquire_shared('ld:a', 'owner-3', '1 minute') IS NULL AS shared_held_back,
       dlock_acquire_all(ARRAY['ld:a', 'ld:b'], 'owner-4', '1 minute') IS NULL AS set_held_back,
       dlock_campaign('ld:a', 'owner-5', '1 minute', wait => '0') IS NULL AS campaign_held_back;
SELECT dlock_acquire('ld:a', 'owner-2', '1 minute', '100 milliseconds') IS NULL AS wait_too_short;
SELECT dlock_wait_free('ld:a', '100 milliseconds') AS free_within_100ms;
-- A wait that outlasts the delay is granted (here: dlock_wait_free, then the acquire at once).
SELECT dlock_wait_free('ld:a', '10 seconds') AS free_after_the_delay;
SELECT dlock_acquire('ld:a', 'owner-2', '1 minute') AS f3 \gset
SELECT :f3 > :f2 AS "f3 > f2";
SELECT dlock_release('ld:a', 'owner-2') AS released;

-- Shared leases: one expired reader holds back writers for its delay (new readers too).
SELECT dlock_acquire_shared('ld:s', 'reader-1', '100 milliseconds', lock_delay => '2 seconds')
       IS NOT NULL AS r1;
SELECT key, owner, mode, lock_delay FROM dlock_locks;
SELECT pg_sleep(0.3);
SELECT dlock_acquire('ld:s', 'writer', '1 minute') IS NULL AS writer_held_back,
       dlock_acquire_shared('ld:s', 'reader-2', '1 minute') IS NULL AS reader_held_back;
SELECT dlock_wait_free('ld:s', '10 seconds') AS free_after_the_delay;
SELECT dlock_acquire('ld:s', 'writer', '1 minute') IS NOT NULL AS writer_granted;
SELECT dlock_release('ld:s', 'writer') AS released;

-- Multi-key: each key of an expired set is held back.
SELECT cardinality(dlock_acquire_all(ARRAY['ld:m1', 'ld:m2'], 'owner-1', '100 milliseconds', '0',
                                     '2 seconds')) AS granted;
SELECT key, lock_delay FROM dlock_locks ORDER BY key;
SELECT pg_sleep(0.3);
SELECT dlock_acquire('ld:m1', 'owner-2', '1 minute') IS NULL AS m1_held_back,
       dlock_acquire('ld:m2', 'owner-2', '1 minute') IS NULL AS m2_held_back;
SELECT dlock_wait_free('ld:m1', '10 seconds') AND dlock_wait_free('ld:m2', '10 seconds') AS free;
SELECT dlock_acquire_all(ARRAY['ld:m1', 'ld:m2'], 'owner-2', '1 minute') IS NOT NULL AS granted;
SELECT dlock_release_all('owner-2') AS released;

-- Elections: an expired leader holds the election back; a resigning one does not.
SELECT dlock_campaign('ld:e', 'node-1', '100 milliseconds', 'n1', lock_delay => '2 seconds') AS t1 \gset
SELECT key, lock_delay FROM dlock_locks;
SELECT pg_sleep(0.3);
SELECT count(*) AS leaders FROM dlock_leader('ld:e');
SELECT dlock_campaign('ld:e', 'node-2', '1 minute', 'n2', '0') IS NULL AS campaign_held_back;
SELECT dlock_campaign('ld:e', 'node-2', '1 minute', 'n2', '10 seconds', '2 seconds') > :t1
       AS won_after_the_delay;
SELECT dlock_release('ld:e', 'node-2') AS resigned;
SELECT dlock_campaign('ld:e', 'node-3', '1 minute', 'n3', '0') IS NOT NULL AS no_delay_after_resign;
SELECT dlock_release('ld:e', 'node-3') AS resigned;

-- A session-bound lease has no expiry, so it ends with its session without any delay.
SELECT dlock_acquire('ld:b', 'owner-1', NULL, '0', '1 hour') IS NOT NULL AS bound;
SELECT pg_backend_pid() AS old_pid \gset
\c
\set SHOW_CONTEXT never
\pset null (null)
DO $$
BEGIN
  FOR i IN 1..500 LOOP
    EXIT WHEN NOT EXISTS (SELECT 1 FROM dlock_locks WHERE key = 'ld:b');
    PERFORM pg_sleep(0.01);
  END LOOP;
END
$$;
SELECT dlock_acquire('ld:b', 'owner-2', '1 minute') IS NOT NULL AS granted_after_session_end;
SELECT dlock_release('ld:b', 'owner-2') AS released;

-- A reentry keeps the lease's own delay; force_release, like a release, leaves none.
SELECT dlock_acquire('ld:f', 'owner-1', '1 minute', '0', '1 hour') IS NOT NULL AS granted;
SELECT dlock_acquire('ld:f', 'owner-1', '1 minute', '0', '0') IS NOT NULL AS reentered;
SELECT lock_delay, hold_count FROM dlock_locks;
SELECT dlock_force_release('ld:f') AS forced;
SELECT dlock_acquire('ld:f', 'owner-2', '1 minute') IS NOT NULL AS granted_at_once;
SELECT dlock_release('ld:f', 'owner-2') AS released;

-- Bad input: a negative delay or one beyond dlock.max_ttl is 22023, NULL 22004.
SELECT dlock_acquire('ld:x', 'owner-1', '1 minute', '0', '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('ld:x', 'owner-1', '1 minute', '0', '1 day 1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('ld:x', 'owner-1', '1 minute', '0', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_shared('ld:x', 'owner-1', '1 minute', lock_delay => '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_campaign('ld:x', 'owner-1', '1 minute', lock_delay => '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS leases FROM dlock_locks;
