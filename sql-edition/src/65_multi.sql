-- dlock_acquire_all: every key exclusively, or none (extension/src/ops/acquire_all.rs). Keys
-- are locked in sorted order (no deadlock whatever the callers' orders); each look is a
-- subtransaction, so a look that does not get them all holds none of them afterwards.
-- Waiting: it queues on the first key found busy (FIFO with that key's other waiters), then
-- looks at all the keys with the bounded backoff of a queue's head.
CREATE FUNCTION dlock_internal.acquire_all(p_keys pg_catalog.text[], p_owner pg_catalog.text, p_ttl pg_catalog.interval,
                                           p_wait pg_catalog.interval, p_lock_delay pg_catalog.interval)
    RETURNS pg_catalog.int8[] LANGUAGE plpgsql
AS $$
DECLARE
    role_ pg_catalog.oid := dlock_internal.caller();
    sorted pg_catalog.text[];
    k pg_catalog.text;
    blocked pg_catalog.text;
    f pg_catalog.int8;
    fences pg_catalog.int8[];
    deadline pg_catalog.timestamptz := pg_catalog.clock_timestamp() + p_wait;
    pause pg_catalog.float8 := 0.001;
    pause_max pg_catalog.float8 := pg_catalog.date_part('epoch', (SELECT s.poll_max FROM dlock_internal.settings AS s));
    left_s pg_catalog.float8;
    qlock pg_catalog.int8;
    lock_timeout_was pg_catalog.text := pg_catalog.current_setting('lock_timeout');
BEGIN
    SELECT pg_catalog.array_agg(u.k ORDER BY u.k COLLATE "C") INTO sorted FROM pg_catalog.unnest(p_keys) AS u(k);
    BEGIN
        LOOP
            BEGIN
                fences := '{}';
                FOREACH k IN ARRAY sorted LOOP
                    blocked := k;
                    IF NOT pg_catalog.pg_try_advisory_xact_lock(dlock_internal.key_lock(k)) THEN
                        IF NOT dlock_internal.after_sweep(k) THEN
                            RAISE SQLSTATE 'DLK01';
                        END IF;
                    END IF;
                    SELECT a.fence INTO f
                      FROM dlock_internal.attempt(k, p_owner, p_ttl, 'x', NULL, p_lock_delay, NULL, role_,
                                                  qlock IS NOT NULL) AS a;
                    IF f IS NULL THEN
                        RAISE SQLSTATE 'DLK01';
                    END IF;
                    fences := fences || f;
                END LOOP;
            EXCEPTION WHEN SQLSTATE 'DLK01' THEN
                fences := NULL;
            END;
            EXIT WHEN fences IS NOT NULL;
            left_s := CASE WHEN deadline IS NULL THEN 'Infinity'::pg_catalog.float8
                           ELSE pg_catalog.date_part('epoch', deadline - pg_catalog.clock_timestamp()) END;
            IF left_s <= 0 THEN
                EXIT;
            END IF;
            -- Waiting: queue on the first key that was busy, as its single waiters do (it
            -- shows among the key's waiters); then look at all of them with the backoff.
            IF qlock IS NULL THEN
                BEGIN
                    IF deadline IS NOT NULL THEN
                        PERFORM pg_catalog.set_config('lock_timeout',
                            GREATEST(1, pg_catalog.ceil(left_s * 1000))::pg_catalog.int8::pg_catalog.text, true);
                    END IF;
                    PERFORM pg_catalog.pg_advisory_lock(dlock_internal.queue_lock(blocked));
                    qlock := dlock_internal.queue_lock(blocked);
                    PERFORM pg_catalog.set_config('lock_timeout', lock_timeout_was, true);
                EXCEPTION WHEN lock_not_available THEN
                    EXIT;   -- the wait ran out in the queue
                END;
                CONTINUE;
            END IF;
            PERFORM pg_catalog.pg_sleep(LEAST(pause, left_s));
            pause := LEAST(pause * 2, pause_max);
        END LOOP;
        IF qlock IS NOT NULL THEN
            PERFORM pg_catalog.pg_advisory_unlock(qlock);
        END IF;
    EXCEPTION WHEN query_canceled OR others THEN
        IF qlock IS NOT NULL THEN
            PERFORM pg_catalog.pg_advisory_unlock(qlock);
        END IF;
        RAISE;
    END;
    IF fences IS NULL THEN
        RETURN NULL;
    END IF;
    -- In the order of p_keys.
    RETURN ARRAY(SELECT fences[pg_catalog.array_position(sorted, u.k)]
                   FROM pg_catalog.unnest(p_keys) WITH ORDINALITY AS u(k, i) ORDER BY u.i);
END
$$;

-- One attempt for callers that wait on dlock_watch: waits up to p_settle (NULL: no limit) only
-- for a transaction that holds the key; never queues.
CREATE FUNCTION dlock_internal.try_acquire(p_key pg_catalog.text, p_owner pg_catalog.text, p_ttl pg_catalog.interval,
                                           p_settle pg_catalog.interval,
                                           OUT fence pg_catalog.int8, OUT retry_after pg_catalog.interval)
    LANGUAGE plpgsql
AS $$
DECLARE
    klock pg_catalog.int8 := dlock_internal.key_lock(p_key);
    lock_timeout_was pg_catalog.text := pg_catalog.current_setting('lock_timeout');
BEGIN
    -- In a subtransaction: a look that finds the key busy lets go of the key lock.
    BEGIN
        IF NOT pg_catalog.pg_try_advisory_xact_lock(klock) THEN
            IF p_settle = '0'::pg_catalog.interval THEN
                IF NOT dlock_internal.after_sweep(p_key) THEN
                    RAISE SQLSTATE 'DLK02';
                END IF;
            ELSE
                -- Waits up to settle (NULL: lock_timeout 0, no limit); once it runs out, one
                -- last look as a try, which waits for a sweep holding the key.
                BEGIN
                    PERFORM pg_catalog.set_config('lock_timeout', CASE WHEN p_settle IS NULL THEN '0'
                        ELSE GREATEST(1, pg_catalog.ceil(pg_catalog.date_part('epoch', p_settle) * 1000))::pg_catalog.int8::pg_catalog.text
                        END, true);
                    PERFORM pg_catalog.pg_advisory_xact_lock(klock);
                    PERFORM pg_catalog.set_config('lock_timeout', lock_timeout_was, true);
                EXCEPTION WHEN lock_not_available THEN
                    IF NOT dlock_internal.after_sweep(p_key) THEN
                        RAISE SQLSTATE 'DLK02';
                    END IF;
                END;
            END IF;
        END IF;
        SELECT a.fence, a.retry_after INTO fence, retry_after
          FROM dlock_internal.attempt(p_key, p_owner, p_ttl, 'x', NULL, '0', NULL, dlock_internal.caller(), false) AS a;
        IF fence IS NULL THEN
            RAISE SQLSTATE 'DLK01';
        END IF;
    EXCEPTION
        WHEN SQLSTATE 'DLK01' THEN NULL;
        WHEN SQLSTATE 'DLK02' OR lock_not_available THEN
            retry_after := '0';   -- a transaction kept the key locked past settle
    END;
END
$$;

-- Waits until no live lease (nor a lock-delay) holds the key, without taking it. Waiters do
-- not queue: each looks with a bounded backoff, holding the key's free-wait lock meanwhile
-- (pg_locks shows who waits for the key; let go of on every way out).
CREATE FUNCTION dlock_internal.wait_free(p_key pg_catalog.text, p_wait pg_catalog.interval)
    RETURNS pg_catalog.bool LANGUAGE plpgsql
AS $$
DECLARE
    deadline pg_catalog.timestamptz := pg_catalog.clock_timestamp() + p_wait;
    pause pg_catalog.float8 := 0.001;
    pause_max pg_catalog.float8 := pg_catalog.date_part('epoch', (SELECT s.poll_max FROM dlock_internal.settings AS s));
    r dlock_internal.lease;
    now_ pg_catalog.timestamptz;
    held pg_catalog.bool;
    until_ pg_catalog.timestamptz;
    started pg_catalog.timestamptz := (SELECT a.backend_start FROM pg_catalog.pg_stat_activity AS a
                                        WHERE a.pid = pg_catalog.pg_backend_pid());
    left_s pg_catalog.float8;
    fwlock constant pg_catalog.int8 := dlock_internal.free_wait_lock(p_key);
    waiting pg_catalog.bool := false;
BEGIN
    BEGIN
    LOOP
        now_ := pg_catalog.clock_timestamp();
        held := false;
        until_ := NULL;
        FOR r IN SELECT * FROM dlock_internal.lease AS l WHERE l.key = p_key AND l.hold_count > 0 LOOP
            IF dlock_internal.is_live(r, now_) THEN
                IF r.holder_pid = pg_catalog.pg_backend_pid() AND (r.expires_at = 'infinity' OR r.acquired_at >= started) THEN
                    PERFORM dlock_internal.fail('55006', pg_catalog.format(
                        'this session holds a lease of the key itself (owner %s): it cannot become free while this session waits for it',
                        pg_catalog.to_json(r.owner)::pg_catalog.text),
                        'Release it first: dlock_wait_free waits for the leases of other sessions.');
                END IF;
                held := true;
                IF r.expires_at <> 'infinity' THEN
                    until_ := GREATEST(until_, r.expires_at + r.lock_delay);
                END IF;
            ELSIF r.expires_at <> 'infinity' AND r.expires_at + r.lock_delay > now_ THEN
                held := true;   -- held back by its lock-delay
                until_ := GREATEST(until_, r.expires_at + r.lock_delay);
            END IF;
        END LOOP;
        EXIT WHEN NOT held;
        left_s := CASE WHEN deadline IS NULL THEN 'Infinity'::pg_catalog.float8
                       ELSE pg_catalog.date_part('epoch', deadline - pg_catalog.clock_timestamp()) END;
        EXIT WHEN left_s <= 0;
        IF NOT waiting THEN
            -- A try: only a role outside dlock could hold it exclusively, and that must not
            -- hold up the wait (the lock only shows the waiter in pg_locks).
            waiting := pg_catalog.pg_try_advisory_lock_shared(fwlock);
        END IF;
        PERFORM pg_catalog.pg_sleep(GREATEST(0.0002, LEAST(pause, left_s,
            COALESCE(pg_catalog.date_part('epoch', until_ - pg_catalog.clock_timestamp()), pause))));
        pause := LEAST(pause * 2, pause_max);
    END LOOP;
    EXCEPTION WHEN query_canceled OR others THEN
        IF waiting THEN
            PERFORM pg_catalog.pg_advisory_unlock_shared(fwlock);   -- a session lock outlives the error
        END IF;
        RAISE;
    END;
    IF waiting THEN
        PERFORM pg_catalog.pg_advisory_unlock_shared(fwlock);
    END IF;
    RETURN NOT held;
END
$$;

-- dlock_watch / dlock_unwatch: LISTEN on the key's channel (at commit, as LISTEN is) and hold
-- the key's watch lock, so that whoever frees the key NOTIFYs.
CREATE FUNCTION dlock_internal.watch(p_key pg_catalog.text) RETURNS pg_catalog.text
    LANGUAGE plpgsql
AS $$
DECLARE
    channel pg_catalog.text := dlock_internal.channel(p_key);
BEGIN
    -- LISTEN takes no parameter: the channel is an identifier made here of hex digits.
    EXECUTE pg_catalog.format('LISTEN %I', channel);
    -- From now on this session's releases look at its own LISTEN list (notify, 40_locks.sql);
    -- undone with the LISTEN should this transaction roll back.
    PERFORM pg_catalog.set_config('dlock_sql.watching', 'on', false);
    -- Waits (not a try): a release's probe holds the watch lock exclusively until it commits.
    IF NOT dlock_internal.holds_advisory(pg_catalog.pg_backend_pid(), dlock_internal.watch_lock(p_key)) THEN
        PERFORM pg_catalog.pg_advisory_lock_shared(dlock_internal.watch_lock(p_key));
    END IF;
    RETURN channel;
END
$$;

CREATE FUNCTION dlock_internal.unwatch(p_key pg_catalog.text) RETURNS pg_catalog.bool
    LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT dlock_internal.holds_advisory(pg_catalog.pg_backend_pid(), dlock_internal.watch_lock(p_key)) THEN
        RETURN false;
    END IF;
    EXECUTE pg_catalog.format('UNLISTEN %I', dlock_internal.channel(p_key));
    PERFORM pg_catalog.pg_advisory_unlock_shared(dlock_internal.watch_lock(p_key));   -- taken once by watch
    RETURN true;
END
$$;

-- The current leader of an election, to any role: the candidate string is never shown.
CREATE FUNCTION dlock_internal.leader(p_election pg_catalog.text)
    RETURNS TABLE (info pg_catalog.text, term pg_catalog.int8, since pg_catalog.timestamptz, expires_at pg_catalog.timestamptz)
    LANGUAGE sql
AS $$
    SELECT l.info, l.fence, l.acquired_at, l.expires_at
      FROM dlock_internal.lease AS l
     WHERE l.key = p_election AND l.kind = 'e' AND dlock_internal.is_live(l, pg_catalog.clock_timestamp())
$$;
