-- Run under the hostile-schema net with the traps armed (regress.sh, DLOCK_HOSTILE=1): every
-- public function on its common and its other paths, in statements that use no operator of
-- their own, so that a trap can only spring inside the edition's own code.
SET dlock_trap.armed = on;
SELECT dlock_acquire('armed:k', 'o1', '1 minute');
SELECT dlock_acquire('armed:k', 'o1', '1 minute');
SELECT dlock_acquire('armed:k', 'o2', '1 minute');
SELECT dlock_acquire('armed:k', 'o2', '1 minute', '30 milliseconds');
SELECT dlock_acquire('armed:d', 'o1', '1 minute', '0', '1 second');
SELECT dlock_acquire('armed:s', 'o1', NULL);
SELECT * FROM dlock_try_acquire('armed:k', 'o3', '1 minute', '10 milliseconds');
SELECT dlock_renew('armed:k', 'o1', '2 minutes');
SELECT dlock_renew('armed:s', 'o1', '2 minutes');
SELECT dlock_holds('armed:k', 1);
SELECT key, owner, mode FROM dlock_locks;
SELECT dlock_acquire_shared('armed:r', 'r1', '1 minute', '0', 3);
SELECT dlock_acquire_shared('armed:r', 'r2', '1 minute', '0', 3);
SELECT dlock_acquire_all(ARRAY['armed:m1', 'armed:m2'], 'o1', '1 minute');
SELECT dlock_acquire_all(ARRAY['armed:m1', 'armed:m3'], 'o2', '1 minute', '20 milliseconds');
SELECT dlock_campaign('armed:e', 'c1', '1 minute', 'info', '0');
SELECT * FROM dlock_leader('armed:e');
SELECT dlock_wait_free('armed:k', '20 milliseconds');
SELECT dlock_watch('armed:k');
SELECT dlock_unwatch('armed:k');
SELECT dlock_release('armed:k', 'o1');
SELECT dlock_release('armed:k', 'o1');
SELECT dlock_release('armed:r', 'r1');
SELECT dlock_release_all('o1');
SELECT dlock_force_release('armed:r');
SELECT dlock_acquire('armed:x', 'o1', '10 milliseconds');
SELECT pg_sleep(0.05);
SELECT dlock_sweep();
SELECT dlock_acquire('armed:x', 'o2', '1 minute');
SELECT dlock_release('armed:x', 'o2');
SELECT dlock_acquire('armed:bad', '', '1 minute');
SELECT dlock_acquire('armed:bad', 'o', '2 days');
SELECT dlock_fast_acquire('armed:f', 'o', '1 second');
SELECT dlock_release_all('o2');
-- A session-bound lease released, then a call in a later transaction: that call lets go of the
-- released lease's bound lock (the deferred unbind, 40_locks.sql).
SELECT dlock_acquire('armed:b', 'o4', NULL);
SELECT dlock_release('armed:b', 'o4');
SELECT dlock_renew('armed:b', 'o4', '1 minute');
-- A key taken again and again, its row written over in place; random() seeded, so that the
-- same grants among these ask for a page sweep at commit (sweep_later) in every run.
SELECT pg_catalog.setseed('0.25'::pg_catalog.float8);
SELECT dlock_acquire('armed:again', 'o5', '1 minute'), dlock_release('armed:again', 'o5')
  FROM pg_catalog.generate_series(1, 32);
-- Unarmed, written against pg_catalog: every lock this session took is let go by now
-- (regress.sh checks the line).
SET dlock_trap.armed = off;
SELECT 'session advisory locks left: ' OPERATOR(pg_catalog.||) pg_catalog.count(*)
  FROM pg_catalog.pg_locks AS l
 WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'::pg_catalog.text AND l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid();
