-- Taking a key, waiting up to p_wait (NULL: no limit) when it is busy.
--
-- A statement cannot wake on NOTIFY (notifications arrive between transactions), and this
-- edition has no shared memory. So: waiters queue in the lock manager on the key's queue lock
-- (first come, first served; pg_stat_activity shows them as Lock/advisory and they use no CPU),
-- and only the head of the queue looks at the key: it waits in the lock manager for a
-- transaction that holds the key lock, and otherwise sleeps between looks with a bounded
-- backoff (1 ms doubling up to settings.poll_max, never past the blocking lease's expiry;
-- shown as Timeout/PgSleep). Each look is a subtransaction, so a look that finds the key busy
-- lets go of the key lock at once.
-- The lock manager's deadlock detector sees waits on key and queue locks, not a head's wait for
-- a session-bound lease (a lease, not a lock, and the bound lock lingers after a release until
-- its session's next call). So a head kept waiting deadlock_timeout by such a lease looks for
-- the cycle itself (dlock_internal.in_cycle), as the detector would, and is its victim (40P01).
-- Whether the head of p_key's queue (this session, holding queue lock p_qlock) waits in a cycle:
-- a session-bound holder of p_key waits in the queue of a key a session-bound lease holds, whose
-- session waits ... back to this session. Read from one snapshot of pg_locks (queue locks held
-- or awaited, bound locks held) and the live session-bound leases. Checks run one at a time
-- (a session lock of their own; a check that finds it taken is skipped), and a session in a
-- cycle leaves its queue before the next check runs: exactly one victim per cycle, as with the
-- lock manager's detector. The modes of
-- the waits are not known, so a wait for a shared key whose session-bound holders share it
-- with the request counts too.
CREATE FUNCTION dlock_internal.in_cycle(p_key pg_catalog.text, p_qlock pg_catalog.int8)
    RETURNS pg_catalog.bool LANGUAGE plpgsql
AS $$
DECLARE
    mutex constant pg_catalog.int8 := pg_catalog.hashtextextended('dlock deadlock check', 7635);
    me constant pg_catalog.int4 := pg_catalog.pg_backend_pid();
    found_ pg_catalog.bool;
BEGIN
    -- Only a session-bound lease of another session can close a cycle.
    IF NOT EXISTS (SELECT FROM dlock_internal.lease AS l
                    WHERE l.key = p_key AND l.hold_count > 0 AND l.owner IS NOT NULL
                      AND l.expires_at = 'infinity'::pg_catalog.timestamptz
                      AND l.holder_pid <> me) THEN
        RETURN false;
    END IF;
    -- Never waits for the mutex: another session's check is running (or a role holds the
    -- lock from outside: the database's advisory locks are open to every role), and this one
    -- comes again at the next deadlock_timeout, within the wait's own limit.
    IF NOT pg_catalog.pg_try_advisory_lock(mutex) THEN
        RETURN false;
    END IF;
    BEGIN
    WITH RECURSIVE
        locks AS MATERIALIZED (
            SELECT g.pid, (g.classid::pg_catalog.int8 << 32) | g.objid::pg_catalog.int8 AS lock, g.mode, g.granted
              FROM pg_catalog.pg_locks AS g
             WHERE g.locktype = 'advisory' AND g.objsubid = 1
               AND g.database = (SELECT d.oid FROM pg_catalog.pg_database AS d
                                  WHERE d.datname = pg_catalog.current_database())),
        bound AS MATERIALIZED (
            SELECT l.key, l.holder_pid
              FROM dlock_internal.lease AS l
             WHERE l.expires_at = 'infinity'::pg_catalog.timestamptz AND l.hold_count > 0
               AND l.owner IS NOT NULL
               AND EXISTS (SELECT FROM locks AS g
                            WHERE g.pid = l.holder_pid AND g.granted AND g.mode = 'ShareLock'
                              AND g.lock = dlock_internal.bound_lock(l.key))),
        edge AS (
            SELECT w.pid AS waiter, b.holder_pid AS holder
              FROM bound AS b JOIN locks AS w
                ON w.mode = 'ExclusiveLock' AND w.lock = dlock_internal.queue_lock(b.key)
               AND w.pid <> b.holder_pid),
        reach(pid) AS (
            SELECT b.holder_pid FROM bound AS b WHERE b.key = p_key AND b.holder_pid <> me
            UNION
            SELECT e.holder FROM reach AS r JOIN edge AS e ON e.waiter = r.pid)
    SELECT EXISTS (SELECT FROM reach AS r WHERE r.pid = me) INTO found_;
    IF found_ THEN
        PERFORM pg_catalog.pg_advisory_unlock(p_qlock);
    END IF;
    EXCEPTION WHEN query_canceled OR others THEN
        PERFORM pg_catalog.pg_advisory_unlock(mutex);   -- a session lock outlives the error
        RAISE;
    END;
    PERFORM pg_catalog.pg_advisory_unlock(mutex);
    RETURN found_;
END
$$;

CREATE FUNCTION dlock_internal.acquire(
    p_key pg_catalog.text, p_owner pg_catalog.text, p_ttl pg_catalog.interval, p_wait pg_catalog.interval,
    p_kind pg_catalog."char", p_max_holders pg_catalog.int4, p_lock_delay pg_catalog.interval,
    p_info pg_catalog.text)
    RETURNS pg_catalog.int8 LANGUAGE plpgsql
AS $$
DECLARE
    role_ pg_catalog.oid := dlock_internal.caller();
    klock pg_catalog.int8 := dlock_internal.key_lock(p_key);
    qlock pg_catalog.int8 := dlock_internal.queue_lock(p_key);
    fence_ pg_catalog.int8;
    retry_ pg_catalog.interval;
    bound_ pg_catalog.bool := false;
    deadline pg_catalog.timestamptz := pg_catalog.clock_timestamp() + p_wait;
    lock_timeout_was pg_catalog.text := pg_catalog.current_setting('lock_timeout');
    pause pg_catalog.float8 := 0.001;
    pause_max pg_catalog.float8;
    left_ms pg_catalog.float8;
    queued pg_catalog.bool := false;
    cycle_check_at pg_catalog.timestamptz;
    -- 1: the wait ran out on the key lock at its deadline: one last look, as a try (which waits
    -- for a sweep that holds the key: a sweep changes no lease); 2: that look was taken.
    last_try pg_catalog.int2 := 0;
BEGIN
    BEGIN
        LOOP
            -- A look at the key: under its key lock, in a subtransaction, so that a look that
            -- finds the key busy lets go of the key lock at once. A try's look never waits (it
            -- answers at once); a wait's looks, its first too, wait in the lock manager for a
            -- transaction that holds the key lock (often the head's own look), so that the
            -- first look sees the key's rows: a request refused by them (a semaphore of another
            -- size, a mode the owner does not hold) is refused at once, never queued.
            -- The head's cheap look first: while a TTL lease that no request can share holds
            -- the key (or its lock-delay does), the full look would only find it busy.
            IF queued AND last_try = 0 AND EXISTS (
                    SELECT FROM dlock_internal.lease AS l
                     WHERE l.key = p_key AND l.kind <> 's' AND l.hold_count > 0 AND l.owner IS NOT NULL
                       AND l.expires_at <> 'infinity'::pg_catalog.timestamptz
                       AND l.expires_at + l.lock_delay > pg_catalog.clock_timestamp()) THEN
                fence_ := NULL;
                retry_ := NULL;   -- the backoff alone decides the next look
            ELSE
            BEGIN
                IF p_wait = '0'::pg_catalog.interval OR last_try = 1 THEN
                    IF last_try = 1 THEN
                        last_try := 2;
                    END IF;
                    IF NOT pg_catalog.pg_try_advisory_xact_lock(klock) THEN
                        IF NOT dlock_internal.after_sweep(p_key) THEN
                            RAISE SQLSTATE 'DLK01';
                        END IF;
                    END IF;
                ELSE
                    IF deadline IS NOT NULL THEN
                        left_ms := pg_catalog.date_part('epoch', deadline - pg_catalog.clock_timestamp()) * 1000;
                        PERFORM pg_catalog.set_config('lock_timeout',
                            GREATEST(1, pg_catalog.ceil(left_ms))::pg_catalog.int8::pg_catalog.text, true);
                    END IF;
                    PERFORM pg_catalog.pg_advisory_xact_lock(klock);
                    PERFORM pg_catalog.set_config('lock_timeout', lock_timeout_was, true);
                END IF;
                SELECT a.fence, a.retry_after, a.bound_here INTO fence_, retry_, bound_
                  FROM dlock_internal.attempt(p_key, p_owner, p_ttl, p_kind, p_max_holders, p_lock_delay,
                                              p_info, role_, queued) AS a;
                IF fence_ IS NULL THEN
                    RAISE SQLSTATE 'DLK01';   -- busy: undo the look, key lock included
                END IF;
            EXCEPTION
                WHEN SQLSTATE 'DLK01' THEN NULL;
                WHEN lock_not_available THEN   -- a transaction kept the key past the wait
                    IF last_try = 0 AND deadline <= pg_catalog.clock_timestamp() THEN
                        last_try := 1;
                    END IF;
            END;
            END IF;
            EXIT WHEN fence_ IS NOT NULL OR p_wait = '0'::pg_catalog.interval OR last_try = 2;
            CONTINUE WHEN last_try = 1;
            IF p_wait IS NULL AND bound_ THEN
                RAISE EXCEPTION USING ERRCODE = '40P01',
                    MESSAGE = 'dlock: deadlock detected: the key is held by a lease bound to this same session',
                    HINT = 'Another owner string of this session holds it; release it first, or give the wait a limit.';
            END IF;
            left_ms := CASE WHEN deadline IS NULL THEN 'Infinity'::pg_catalog.float8
                            ELSE pg_catalog.date_part('epoch', deadline - pg_catalog.clock_timestamp()) * 1000 END;
            EXIT WHEN left_ms <= 0;
            IF NOT queued THEN
                -- Join the queue (first come, first served), then look again as its head.
                BEGIN
                    IF deadline IS NOT NULL THEN
                        PERFORM pg_catalog.set_config('lock_timeout',
                            GREATEST(1, pg_catalog.ceil(left_ms))::pg_catalog.int8::pg_catalog.text, true);
                    END IF;
                    PERFORM pg_catalog.pg_advisory_lock(qlock);
                    queued := true;
                    PERFORM pg_catalog.set_config('lock_timeout', lock_timeout_was, true);
                EXCEPTION WHEN lock_not_available THEN
                    EXIT;   -- the wait ran out in the queue (the subtransaction undid the setting)
                END;
                pause_max := pg_catalog.date_part('epoch', (SELECT s.poll_max FROM dlock_internal.settings AS s));
                cycle_check_at := pg_catalog.clock_timestamp()
                    + pg_catalog.current_setting('deadlock_timeout')::pg_catalog.interval;
                CONTINUE;
            END IF;
            IF pg_catalog.clock_timestamp() >= cycle_check_at THEN
                cycle_check_at := pg_catalog.clock_timestamp()
                    + pg_catalog.current_setting('deadlock_timeout')::pg_catalog.interval;
                IF dlock_internal.in_cycle(p_key, qlock) THEN
                    queued := false;   -- in_cycle left the queue: the cycle is broken here
                    RAISE EXCEPTION USING ERRCODE = '40P01',
                        MESSAGE = 'dlock: deadlock detected: this wait and the session-bound leases it waits for form a cycle',
                        DETAIL = 'The key is held by a lease bound to a session that waits, directly or through others, for a lease bound to this session.',
                        HINT = 'Release this session''s leases and retry, or take keys in one order everywhere.';
                END IF;
            END IF;
            PERFORM pg_catalog.pg_sleep(GREATEST(0.0002, LEAST(pause, left_ms / 1000,
                COALESCE(pg_catalog.date_part('epoch', retry_), pause))));
            pause := LEAST(pause * 2, pause_max);
        END LOOP;
        IF queued THEN
            PERFORM pg_catalog.pg_advisory_unlock(qlock);
        END IF;
        RETURN fence_;
    EXCEPTION WHEN query_canceled OR others THEN
        -- Cancelled, timed out by statement_timeout, or refused: leave the queue, no trace.
        IF queued THEN
            PERFORM pg_catalog.pg_advisory_unlock(qlock);
        END IF;
        RAISE;
    END;
END
$$;
