-- The lock manager's part. All are advisory locks on a 64-bit hash of the key, one seed per
-- purpose (collisions across 2^64 are ignored, as the native edition ignores xxh3's):
--   key lock    (xact, exclusive):  taken by every change of the key, held to the end of the
--                                   transaction, so the key is busy while a change is open
--                                   (tries answer NULL at once; waits wait in the lock manager)
--               (xact, share):      a true dlock_holds pins the key until its transaction ends
--   queue lock  (session, exclusive): waiters of the key queue on it, first come first served;
--                                   only the head polls the key
--               (xact, share, try): an acquire that would not wait sees whether anyone queues
--   bound lock  (session, share):   held by the session of a session-bound lease: the lease is
--                                   live while its holder_pid holds it (pg_locks)
--   watch lock  (session, share):   held by sessions that dlock_watch the key; a release
--                                   probes it to know whether to NOTIFY
--   free-wait lock (session, share): held by sessions in dlock_wait_free for the key while they
--                                   wait, so that pg_locks shows who waits for which key
--   sweep lock  (xact, exclusive):  taken before the key lock by a sweep of one of the key's
--                                   rows, held to its commit: a try that finds the key lock
--                                   taken waits for a sweep (which changes no lease), and
--                                   answers busy at once for anything else (after_sweep)
CREATE FUNCTION dlock_internal.key_lock(p_key pg_catalog.text) RETURNS pg_catalog.int8
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT pg_catalog.hashtextextended(p_key COLLATE "C", 7631) $$;
CREATE FUNCTION dlock_internal.queue_lock(p_key pg_catalog.text) RETURNS pg_catalog.int8
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT pg_catalog.hashtextextended(p_key COLLATE "C", 7632) $$;
CREATE FUNCTION dlock_internal.bound_lock(p_key pg_catalog.text) RETURNS pg_catalog.int8
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT pg_catalog.hashtextextended(p_key COLLATE "C", 7633) $$;
CREATE FUNCTION dlock_internal.watch_lock(p_key pg_catalog.text) RETURNS pg_catalog.int8
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT pg_catalog.hashtextextended(p_key COLLATE "C", 7634) $$;
CREATE FUNCTION dlock_internal.free_wait_lock(p_key pg_catalog.text) RETURNS pg_catalog.int8
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT pg_catalog.hashtextextended(p_key COLLATE "C", 7636) $$;
CREATE FUNCTION dlock_internal.sweep_lock(p_key pg_catalog.text) RETURNS pg_catalog.int8
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT pg_catalog.hashtextextended(p_key COLLATE "C", 7637) $$;

-- A try found the key lock taken. If a sweep holds it (deleting a row of the key whose lease
-- was over, as its transaction commits), the key is not busy: waits for the key lock, no longer
-- than deadlock_timeout, and takes it. Anything else holding it answers at once: false
-- (extension/src/locks/key.rs, after_sweep). A sweep takes its sweep lock before the key lock,
-- so whoever finds the key lock taken by a sweep finds the sweep lock taken too, unless the
-- sweep's commit let go of it in between: then one more try of the key lock. (The commit lets go
-- of both locks in one call, so the window for a try that still finds the key lock taken is
-- that call's few microseconds.) The share-mode sweep lock a look takes stays to the end of the
-- caller's (sub)transaction, which a busy answer rolls back; meanwhile no sweep starts on the key.
CREATE FUNCTION dlock_internal.after_sweep(p_key pg_catalog.text) RETURNS pg_catalog.bool
    LANGUAGE plpgsql
AS $$
DECLARE
    klock pg_catalog.int8 := dlock_internal.key_lock(p_key);
    lock_timeout_was pg_catalog.text;
BEGIN
    IF pg_catalog.pg_try_advisory_xact_lock_shared(dlock_internal.sweep_lock(p_key)) THEN
        RETURN pg_catalog.pg_try_advisory_xact_lock(klock);
    END IF;
    lock_timeout_was := pg_catalog.current_setting('lock_timeout');
    BEGIN
        PERFORM pg_catalog.set_config('lock_timeout', pg_catalog.current_setting('deadlock_timeout'), true);
        PERFORM pg_catalog.pg_advisory_xact_lock(klock);
        PERFORM pg_catalog.set_config('lock_timeout', lock_timeout_was, true);
        RETURN true;
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;   -- the key stayed locked past deadlock_timeout (a whole-table dlock_sweep)
    END;
END
$$;

-- The key's NOTIFY channel: "dlock_" and 16 hex digits, like the native edition's (whose hash
-- is xxh3: the digits differ, clients take the channel from dlock_watch). No payload: the key's
-- name stays private.
CREATE FUNCTION dlock_internal.channel(p_key pg_catalog.text) RETURNS pg_catalog.text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 'dlock_' || pg_catalog.lpad(pg_catalog.to_hex(dlock_internal.watch_lock(p_key)), 16, '0') $$;

-- Whether a backend holds an advisory lock (as pg_locks shows a bigint one).
-- The parameters of every SQL-language function here are named p_*: in a SQL function a
-- column of the same name wins over a parameter, and `l.pid = pid` would compare pg_locks'
-- column with itself (security.sh checks the rule in the catalog).
CREATE FUNCTION dlock_internal.holds_advisory(p_pid pg_catalog.int4, p_lock pg_catalog.int8)
    RETURNS pg_catalog.bool LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (
        SELECT FROM pg_catalog.pg_locks AS l
         WHERE l.locktype = 'advisory' AND l.pid = p_pid AND l.granted
           AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = pg_catalog.current_database())
           AND l.classid = ((p_lock >> 32) & 4294967295)::pg_catalog.oid
           AND l.objid = (p_lock & 4294967295)::pg_catalog.oid
           AND l.objsubid = 1)
$$;

-- Whether a session-bound lease held by pid is live: pid still holds the key's bound lock (a
-- pid reused by a new backend does not). This session too asks pg_locks, not its own pid: a
-- DISCARD ALL (a pooler's reset) or pg_advisory_unlock_all() lets go of the bound locks, and
-- the session must then see its leases ended as every other session does.
CREATE FUNCTION dlock_internal.bound_alive(p_key pg_catalog.text, p_pid pg_catalog.int4)
    RETURNS pg_catalog.bool LANGUAGE sql STABLE
AS $$ SELECT dlock_internal.holds_advisory(p_pid, dlock_internal.bound_lock(p_key)) $$;

-- A session-bound lease's session holds the key's bound lock (shared). It is a session-level
-- advisory lock, which a ROLLBACK neither gives back nor takes back: a release that let go of it
-- at once, then rolled back, would leave its restored lease looking dead to every other session.
-- So a release notes the key in the session's setting dlock_sql.unbind (set_config, which a
-- ROLLBACK undoes) with its transaction, and the session's next call in a later transaction
-- lets go of the bound locks of keys that earlier (so committed) releases noted and no live
-- lease of this session is bound to any more (every call that takes its caller's role: all but
-- a dlock_holds that answers false).
-- A grant takes the lock without asking pg_locks whether the session holds it already (that
-- copies the whole lock table: a third of a session-bound pair's time, more with many locks), so
-- the lock may be held more than once: after an acquire rolled back, or with several owners of
-- one key in one session. The let-go then leaves it held: one lock-table entry whatever the
-- count, until the session ends. A lingering bound lock binds no live row, so it keeps no
-- lease alive; what matters is the other way round, and a live bound lease's lock is never let go.
-- dlock takes bound locks only in share mode, so a try fails only when a role outside dlock
-- holds the lock exclusively (the database's advisory locks are open to every role): refused
-- at once (55P03) rather than waiting past any limit. (Inside a grant's look, 55P03 is what a
-- key held by an open transaction answers too: the look finds the key busy.) Not so the watch
-- lock: a release's probe holds it exclusively until it commits, and dlock_watch waits for that.
CREATE FUNCTION dlock_internal.outside_lock(p_what pg_catalog.text) RETURNS void
    LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM dlock_internal.fail('55P03', pg_catalog.format(
        'the key''s %s lock is held exclusively by a session outside dlock', p_what),
        'Another session took dlock''s advisory lock of this key with pg_advisory_lock: find it in pg_locks (locktype advisory) and end it.');
END
$$;

CREATE FUNCTION dlock_internal.bind(p_key pg_catalog.text) RETURNS void
    LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT pg_catalog.pg_try_advisory_lock_shared(dlock_internal.bound_lock(p_key)) THEN
        PERFORM dlock_internal.outside_lock('bound');
    END IF;
END
$$;

CREATE FUNCTION dlock_internal.unbind_later(p_key pg_catalog.text) RETURNS void
    LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_catalog.set_config('dlock_sql.unbind',
        (COALESCE(NULLIF(pg_catalog.current_setting('dlock_sql.unbind', true), ''), '[]')::pg_catalog.jsonb
         OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_array(
             pg_catalog.pg_current_xact_id()::pg_catalog.text, p_key)))::pg_catalog.text,
        false);
END
$$;

CREATE FUNCTION dlock_internal.unbind_released() RETURNS void
    LANGUAGE plpgsql
AS $$
DECLARE
    me pg_catalog.text := pg_catalog.pg_current_xact_id_if_assigned()::pg_catalog.text;
    entry pg_catalog.jsonb;
    k pg_catalog.text;
    kept pg_catalog.jsonb := '[]';
BEGIN
    FOR entry IN SELECT e.value FROM pg_catalog.jsonb_array_elements(
                     pg_catalog.current_setting('dlock_sql.unbind', true)::pg_catalog.jsonb) AS e LOOP
        IF entry OPERATOR(pg_catalog.->>) 0 = me THEN
            kept := kept OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_array(entry);   -- may still roll back
            CONTINUE;
        END IF;
        k := entry OPERATOR(pg_catalog.->>) 1;
        IF dlock_internal.holds_advisory(pg_catalog.pg_backend_pid(), dlock_internal.bound_lock(k))
           AND NOT EXISTS (SELECT FROM dlock_internal.lease AS l
                            WHERE l.key = k AND l.hold_count > 0 AND l.owner IS NOT NULL
                              AND l.expires_at = 'infinity'::pg_catalog.timestamptz
                              AND l.holder_pid = pg_catalog.pg_backend_pid()) THEN
            PERFORM pg_catalog.pg_advisory_unlock_shared(dlock_internal.bound_lock(k));
        END IF;
    END LOOP;
    PERFORM pg_catalog.set_config('dlock_sql.unbind', CASE WHEN kept = '[]' THEN '' ELSE kept::pg_catalog.text END, false);
END
$$;

-- Whether a lease row is live at `at`: held, and unexpired or session-bound to a live session.
CREATE FUNCTION dlock_internal.is_live(p_l dlock_internal.lease, p_at pg_catalog.timestamptz)
    RETURNS pg_catalog.bool LANGUAGE sql STABLE
AS $$
    SELECT (p_l).hold_count > 0 AND (p_l).owner IS NOT NULL
       AND CASE WHEN (p_l).expires_at = 'infinity'::pg_catalog.timestamptz
                THEN dlock_internal.bound_alive((p_l).key, (p_l).holder_pid)
                ELSE (p_l).expires_at > p_at END
$$;

-- Tells the key's watchers (if any) that it may have become free: a NOTIFY at commit. A probe
-- of the watch lock, so that keys nobody watches cost no NOTIFY (which serializes commits).
-- The probe cannot see this session's own watch (a backend's locks never conflict with its
-- own requests): its own LISTEN list can, looked at only in a session that has watched a key
-- (dlock_sql.watching, set by dlock_internal.watch): a query costs more than the probe.
CREATE FUNCTION dlock_internal.notify(key pg_catalog.text) RETURNS void
    LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT pg_catalog.pg_try_advisory_xact_lock(dlock_internal.watch_lock(key)) THEN
        PERFORM pg_catalog.pg_notify(dlock_internal.channel(key), '');
    ELSIF pg_catalog.current_setting('dlock_sql.watching', true) = 'on' THEN
        IF dlock_internal.channel(key) IN (SELECT c FROM pg_catalog.pg_listening_channels() AS c) THEN
            PERFORM pg_catalog.pg_notify(dlock_internal.channel(key), '');
        END IF;
    END IF;
END
$$;

-- Grants must survive a crash: a session running with synchronous_commit off or local has it
-- raised to on for the granting transaction, so the commit (and the fence sequence's WAL
-- before it) is flushed before the fence reaches the client.
CREATE FUNCTION dlock_internal.durable_commit() RETURNS void
    LANGUAGE plpgsql
AS $$
BEGIN
    IF pg_catalog.current_setting('synchronous_commit') IN ('off', 'local') THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
    END IF;
END
$$;
