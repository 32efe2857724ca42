-- One attempt to take a key, the caller holding its key lock: the contract's rules over the
-- key's rows (extension/src/ops/attempt.rs). kind: 'x' exclusive, 's' shared, 'e' leader.
-- fence: the grant (a re-entry's own fence), or NULL with
--   retry_after: how long until the blocking leases (and lock-delays) run out by themselves;
--                NULL when only a release or a session's end frees the key;
--   bound_here:  a blocking lease is bound to this very session (an unbounded wait is 40P01).
CREATE FUNCTION dlock_internal.attempt(
    p_key pg_catalog.text, p_owner pg_catalog.text, p_ttl pg_catalog.interval, p_kind pg_catalog."char",
    p_max_holders pg_catalog.int4, p_lock_delay pg_catalog.interval, p_info pg_catalog.text,
    p_role pg_catalog.oid, p_queued pg_catalog.bool,
    OUT fence pg_catalog.int8, OUT retry_after pg_catalog.interval, OUT bound_here pg_catalog.bool)
    LANGUAGE plpgsql
AS $$
DECLARE
    now_ pg_catalog.timestamptz := pg_catalog.clock_timestamp();
    r dlock_internal.lease;
    mine dlock_internal.lease;
    live pg_catalog.bool;
    busy pg_catalog.bool := false;
    until_free pg_catalog.timestamptz;
    bound_blocker pg_catalog.bool := false;
    shared_holders pg_catalog.int4 := 0;
    shared_max pg_catalog.int4;
    shared_max_seen pg_catalog.bool := false;
    last_fence pg_catalog.int8 := 0;
    dead_rows pg_catalog.bool := false;
    key_row pg_catalog.bool := false;
    owner_taken pg_catalog.bool := false;
    expires pg_catalog.timestamptz;
    names CONSTANT pg_catalog.text[] := ARRAY['an exclusive lease', 'a shared lease', 'the election''s lead'];
BEGIN
    PERFORM dlock_internal.check_no_shard_map();
    bound_here := false;
    FOR r IN SELECT * FROM dlock_internal.lease AS l WHERE l.key = p_key LOOP
        last_fence := GREATEST(last_fence, r.fence);
        IF r.holder = '' THEN
            key_row := true;
        END IF;
        IF r.hold_count = 0 OR r.owner IS NULL THEN
            CONTINUE;
        END IF;
        IF r.expires_at = 'infinity' THEN
            live := dlock_internal.bound_alive(r.key, r.holder_pid);
        ELSE
            live := r.expires_at > now_;
        END IF;
        IF NOT live THEN
            dead_rows := true;
            -- An expired lease holds the key back for its lock-delay (not a dead session's).
            IF r.expires_at <> 'infinity' AND r.expires_at + r.lock_delay > now_ THEN
                busy := true;
                until_free := GREATEST(until_free, r.expires_at + r.lock_delay);
            END IF;
            CONTINUE;
        END IF;
        IF r.owner = p_owner AND r.role = p_role THEN
            mine := r;
            CONTINUE;
        END IF;
        IF r.owner = p_owner THEN
            -- Another role's lease under this owner string: the key is busy for us (before any
            -- question of a semaphore's size, as natively).
            owner_taken := true;
            busy := true;
            IF r.expires_at = 'infinity' THEN
                bound_blocker := true;
            ELSE
                until_free := GREATEST(until_free, r.expires_at + r.lock_delay);
            END IF;
        END IF;
        IF r.kind = 's' THEN
            shared_holders := shared_holders + 1;
            shared_max := r.max_holders;
            shared_max_seen := true;
            IF p_kind <> 's' THEN
                busy := true;
            END IF;
        ELSE
            busy := true;
        END IF;
        IF r.expires_at = 'infinity' THEN
            bound_blocker := true;
            IF r.holder_pid = pg_catalog.pg_backend_pid() AND (p_kind <> 's' OR r.kind <> 's') THEN
                bound_here := true;
            END IF;
        ELSIF p_kind <> 's' OR r.kind <> 's' THEN
            until_free := GREATEST(until_free, r.expires_at + r.lock_delay);
        END IF;
    END LOOP;

    -- Re-entry: the same owner, the same role, the same mode.
    IF mine.key IS NOT NULL THEN
        IF mine.kind <> p_kind THEN
            PERFORM dlock_internal.fail('0A000', pg_catalog.format(
                'owner %s holds %s on this key and cannot take %s on it too (no upgrade or downgrade)',
                pg_catalog.to_json(p_owner)::pg_catalog.text,
                names[pg_catalog.strpos('xse', mine.kind::pg_catalog.text)],
                names[pg_catalog.strpos('xse', p_kind::pg_catalog.text)]),
                'A read-write lock is never upgraded or downgraded in place: release the lease, then take the key in the other mode.');
        END IF;
        IF p_kind = 's' AND mine.max_holders IS DISTINCT FROM p_max_holders THEN
            PERFORM dlock_internal.fail('22023', pg_catalog.format('the key''s holders hold it with max_holders %s, not %s',
                COALESCE(mine.max_holders::pg_catalog.text, 'NULL'), COALESCE(p_max_holders::pg_catalog.text, 'NULL')),
                'Every participant of a semaphore passes the same max_holders; it is fixed by the holders while any hold the key.');
        END IF;
        expires := CASE WHEN p_ttl IS NULL THEN 'infinity' ELSE now_ + p_ttl END;
        UPDATE dlock_internal.lease AS l
           SET hold_count = l.hold_count + 1,
               expires_at = GREATEST(l.expires_at, expires),
               holder_pid = CASE WHEN expires = 'infinity' AND l.expires_at <> 'infinity'
                                 THEN pg_catalog.pg_backend_pid() ELSE l.holder_pid END
         WHERE l.key = p_key AND l.holder = mine.holder;
        IF expires = 'infinity' AND mine.expires_at <> 'infinity' THEN
            PERFORM dlock_internal.bind(p_key);
        END IF;
        fence := mine.fence;
        RETURN;
    END IF;

    -- A semaphore's size is fixed by its live holders.
    IF p_kind = 's' AND NOT owner_taken AND shared_max_seen AND shared_max IS DISTINCT FROM p_max_holders THEN
        PERFORM dlock_internal.fail('22023', pg_catalog.format('the key''s holders hold it with max_holders %s, not %s',
            COALESCE(shared_max::pg_catalog.text, 'NULL'), COALESCE(p_max_holders::pg_catalog.text, 'NULL')),
            'Every participant of a semaphore passes the same max_holders; it is fixed by the holders while any hold the key.');
    END IF;
    IF p_kind = 's' AND p_max_holders IS NOT NULL AND shared_holders >= p_max_holders THEN
        busy := true;
        -- A permit comes back when the first shared lease ends.
        SELECT pg_catalog.min(l.expires_at + l.lock_delay) INTO expires
          FROM dlock_internal.lease AS l
         WHERE l.key = p_key AND l.kind = 's' AND l.hold_count > 0 AND l.expires_at > now_;
        IF expires = 'infinity' THEN
            bound_blocker := true;
        ELSE
            until_free := GREATEST(until_free, expires);
        END IF;
    END IF;
    -- No barging: while sessions queue for the key, only the head of the queue takes it.
    IF NOT busy AND NOT p_queued
       AND NOT pg_catalog.pg_try_advisory_xact_lock_shared(dlock_internal.queue_lock(p_key)) THEN
        busy := true;
        bound_blocker := true;
    END IF;
    IF busy THEN
        retry_after := CASE WHEN bound_blocker OR until_free IS NULL THEN NULL
                            ELSE GREATEST(until_free - now_, '0'::pg_catalog.interval) END;
        RETURN;
    END IF;

    -- Grant. Leases that are over go first (an owner has one lease of a key at most).
    IF dead_rows THEN
        DELETE FROM dlock_internal.lease AS l
         WHERE l.key = p_key AND l.holder <> '' AND NOT dlock_internal.is_live(l, now_);
        UPDATE dlock_internal.lease AS l
           SET hold_count = 0, owner = NULL, role = NULL, holder_pid = NULL, info = NULL,
               expires_at = now_
         WHERE l.key = p_key AND l.holder = '' AND l.hold_count > 0 AND NOT dlock_internal.is_live(l, now_);
    END IF;
    -- Fences only grow: from the sequence, and above every fence this key's rows remember
    -- (a free key row keeps its last; a sequence set back by a restore cannot repeat them).
    fence := GREATEST(pg_catalog.nextval('dlock_internal.fence_seq'::pg_catalog.regclass), last_fence + 1);
    expires := CASE WHEN p_ttl IS NULL THEN 'infinity' ELSE now_ + p_ttl END;
    IF p_ttl IS NULL THEN
        -- Bound before the row is written: the page sweep below must see it live.
        PERFORM dlock_internal.bind(p_key);
    END IF;
    IF p_kind = 's' THEN
        INSERT INTO dlock_internal.lease AS l (key, owner, role, fence, hold_count, acquired_at, expires_at,
                                               holder_pid, kind, max_holders, lock_delay, info, holder)
        VALUES (p_key, p_owner, p_role, fence, 1, now_, expires, pg_catalog.pg_backend_pid(), 's',
                p_max_holders, p_lock_delay, NULL, p_owner);
    ELSIF key_row THEN
        UPDATE dlock_internal.lease AS l
           SET owner = p_owner, role = p_role, fence = attempt.fence, hold_count = 1, acquired_at = now_,
               expires_at = expires, holder_pid = pg_catalog.pg_backend_pid(), kind = p_kind,
               lock_delay = p_lock_delay, info = p_info   -- (max_holders: NULL on key rows)
         WHERE l.key = p_key AND l.holder = '';
        IF pg_catalog.random() < 0.125 THEN
            PERFORM dlock_internal.sweep_later(p_key);
        END IF;
    ELSE
        INSERT INTO dlock_internal.lease AS l (key, owner, role, fence, hold_count, acquired_at, expires_at,
                                               holder_pid, kind, max_holders, lock_delay, info, holder)
        VALUES (p_key, p_owner, p_role, fence, 1, now_, expires, pg_catalog.pg_backend_pid(), p_kind,
                NULL, p_lock_delay, p_info, '');
    END IF;
    IF p_kind = 'e' THEN
        -- A change of leader: the election's watchers hear of it.
        PERFORM dlock_internal.notify(p_key);
    END IF;
    PERFORM dlock_internal.durable_commit();
END
$$;
