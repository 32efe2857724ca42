-- The public functions: the native edition's signatures exactly (names, argument names,
-- defaults, results; compare dlock--0.3.0.sql), created in the first schema of the installer's
-- search_path. Each checks its arguments first (a refused call changes nothing), then calls
-- the internal function. SECURITY DEFINER: they alone reach dlock_internal.
-- The common case first, in as few statements as PL/pgSQL allows (each costs): a try (wait 0)
-- with good arguments, a key whose row is free (or its lease expired, with no lock-delay), no
-- owner rows, nobody queued: one UPDATE under the key lock (should a race make it find the key
-- taken after all, this try keeps the key lock to the end of its transaction). Waits never
-- take this path: a waiter must hold no key lock while it queues. Anything else takes the general path
-- (dlock_internal.acquire), which checks the arguments with their messages and applies every
-- rule; both give the same answers.
CREATE FUNCTION dlock_acquire(key pg_catalog.text, owner pg_catalog.text, ttl pg_catalog.interval,
                              wait pg_catalog.interval DEFAULT '0 seconds'::pg_catalog.interval)
    RETURNS pg_catalog.int8 LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    now_ pg_catalog.timestamptz;
    granted pg_catalog.int8;
    look pg_catalog.bool;
BEGIN
    IF pg_catalog.octet_length(key) BETWEEN 1 AND 1024 AND pg_catalog.octet_length(owner) BETWEEN 1 AND 256
       AND ttl > '0'::pg_catalog.interval AND wait = '0'::pg_catalog.interval
       -- (a session's own dlock.max_ttl, honoured for superusers, takes the general path)
       AND COALESCE(pg_catalog.current_setting('dlock.max_ttl', true), '') = ''
       -- (a session that routes with a shard map is refused by the general path)
       AND COALESCE(pg_catalog.current_setting('dlock.shard_epoch', true), '') IN ('', '0') THEN
        -- A first look without a lock, one index read: the key's row of the greatest holder is
        -- its key row (holder '' sorts first: no owner rows), free, and the ttl within max_ttl;
        -- only then (CASE keeps the order) the locks. A try that finds the key busy must not
        -- keep the key lock for the rest of its transaction.
        SELECT CASE WHEN l.holder = '' AND (l.hold_count = 0 OR l.owner IS NULL
                                            OR (l.expires_at <> 'infinity'::pg_catalog.timestamptz
                                                AND l.expires_at + l.lock_delay <= pg_catalog.clock_timestamp()))
                         AND ttl <= (SELECT s.max_ttl::pg_catalog.interval FROM dlock_internal.settings AS s)
                    THEN pg_catalog.pg_try_advisory_xact_lock_shared(dlock_internal.queue_lock(dlock_acquire.key))
                         AND pg_catalog.pg_try_advisory_xact_lock(dlock_internal.key_lock(dlock_acquire.key))
                    ELSE false END
          INTO look
          FROM dlock_internal.lease AS l WHERE l.key = dlock_acquire.key
         ORDER BY l.holder DESC LIMIT 1;
        IF look THEN
            -- Under the key lock, in a snapshot taken after it: the rows again.
            now_ := pg_catalog.clock_timestamp();
            UPDATE dlock_internal.lease AS l
               SET owner = dlock_acquire.owner, role = dlock_internal.caller(),
                   fence = GREATEST(pg_catalog.nextval('dlock_internal.fence_seq'::pg_catalog.regclass), l.fence + 1),
                   hold_count = 1, acquired_at = now_, expires_at = now_ + ttl,
                   holder_pid = pg_catalog.pg_backend_pid(), kind = 'x',
                   lock_delay = '0'::pg_catalog.interval, info = NULL
             WHERE l.key = dlock_acquire.key AND l.holder = ''
               AND (l.hold_count = 0 OR l.owner IS NULL
                    OR (l.expires_at <> 'infinity'::pg_catalog.timestamptz AND l.expires_at + l.lock_delay <= now_))
               AND NOT EXISTS (SELECT FROM dlock_internal.lease AS o
                                WHERE o.key = dlock_acquire.key AND o.holder <> '')
            RETURNING l.fence INTO granted;
            IF granted IS NOT NULL THEN
                PERFORM dlock_internal.durable_commit();
                IF pg_catalog.random() < 0.125 THEN
                    PERFORM dlock_internal.sweep_later(key);
                END IF;
                RETURN granted;
            END IF;
        END IF;
    END IF;
    PERFORM dlock_internal.check_text('key', key, 1024);
    PERFORM dlock_internal.check_text('owner', owner, 256);
    PERFORM dlock_internal.check_ttl(ttl);
    PERFORM dlock_internal.check_wait(wait);
    RETURN dlock_internal.acquire(key, owner, ttl, wait, 'x', NULL, '0', NULL);
END
$$;

CREATE FUNCTION dlock_acquire(key pg_catalog.text, owner pg_catalog.text, ttl pg_catalog.interval,
                              wait pg_catalog.interval, lock_delay pg_catalog.interval)
    RETURNS pg_catalog.int8 LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM dlock_internal.check_text('key', key, 1024);
    PERFORM dlock_internal.check_text('owner', owner, 256);
    PERFORM dlock_internal.check_ttl(ttl);
    PERFORM dlock_internal.check_wait(wait);
    PERFORM dlock_internal.check_lock_delay(lock_delay);
    RETURN dlock_internal.acquire(key, owner, ttl, wait, 'x', NULL, lock_delay, NULL);
END
$$;

CREATE FUNCTION dlock_acquire_shared(key pg_catalog.text, owner pg_catalog.text, ttl pg_catalog.interval,
                                     wait pg_catalog.interval DEFAULT '0 seconds'::pg_catalog.interval,
                                     max_holders pg_catalog.int4 DEFAULT NULL,
                                     lock_delay pg_catalog.interval DEFAULT '0 seconds'::pg_catalog.interval)
    RETURNS pg_catalog.int8 LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM dlock_internal.check_text('key', key, 1024);
    PERFORM dlock_internal.check_text('owner', owner, 256);
    PERFORM dlock_internal.check_ttl(ttl);
    PERFORM dlock_internal.check_wait(wait);
    PERFORM dlock_internal.check_max_holders(max_holders);
    PERFORM dlock_internal.check_lock_delay(lock_delay);
    RETURN dlock_internal.acquire(key, owner, ttl, wait, 's', max_holders, lock_delay, NULL);
END
$$;

CREATE FUNCTION dlock_acquire_all(keys pg_catalog.text[], owner pg_catalog.text, ttl pg_catalog.interval,
                                  wait pg_catalog.interval DEFAULT '0 seconds'::pg_catalog.interval,
                                  lock_delay pg_catalog.interval DEFAULT '0 seconds'::pg_catalog.interval)
    RETURNS pg_catalog.int8[] LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    k pg_catalog.text;
    dup pg_catalog.text;
BEGIN
    IF keys IS NULL THEN
        PERFORM dlock_internal.fail('22004', 'keys must not be NULL');
    END IF;
    IF pg_catalog.array_ndims(keys) > 1 THEN
        PERFORM dlock_internal.fail('22023', pg_catalog.format('keys must be a one-dimensional array, not %s-dimensional',
            pg_catalog.array_ndims(keys)));
    END IF;
    IF COALESCE(pg_catalog.cardinality(keys), 0) = 0 THEN
        PERFORM dlock_internal.fail('22023', 'keys must not be empty');
    END IF;
    IF pg_catalog.cardinality(keys) > 64 THEN
        PERFORM dlock_internal.fail('22023', pg_catalog.format('keys has %s elements, the limit is 64', pg_catalog.cardinality(keys)),
            'Take the keys in several calls, or lock a key that stands for the group.');
    END IF;
    FOREACH k IN ARRAY keys LOOP
        IF k IS NULL THEN
            PERFORM dlock_internal.fail('22004', 'keys must not contain NULL');
        END IF;
        PERFORM dlock_internal.check_text('key', k, 1024);
    END LOOP;
    SELECT u.k INTO dup FROM pg_catalog.unnest(keys) WITH ORDINALITY AS u(k, i)
     GROUP BY u.k HAVING pg_catalog.count(*) > 1 ORDER BY pg_catalog.min(u.i) LIMIT 1;
    IF dup IS NOT NULL THEN
        PERFORM dlock_internal.fail('22023', pg_catalog.format('keys lists %s twice', pg_catalog.to_json(dup)::pg_catalog.text));
    END IF;
    PERFORM dlock_internal.check_text('owner', owner, 256);
    PERFORM dlock_internal.check_ttl(ttl);
    PERFORM dlock_internal.check_wait(wait);
    PERFORM dlock_internal.check_lock_delay(lock_delay);
    RETURN dlock_internal.acquire_all(keys, owner, ttl, wait, lock_delay);
END
$$;

CREATE FUNCTION dlock_campaign(election pg_catalog.text, candidate pg_catalog.text, ttl pg_catalog.interval,
                               info pg_catalog.text DEFAULT NULL, wait pg_catalog.interval DEFAULT NULL,
                               lock_delay pg_catalog.interval DEFAULT '0 seconds'::pg_catalog.interval)
    RETURNS pg_catalog.int8 LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM dlock_internal.check_text('election', election, 1024);
    PERFORM dlock_internal.check_text('candidate', candidate, 256);
    PERFORM dlock_internal.check_ttl(ttl);
    IF pg_catalog.octet_length(info) > 1024 THEN
        PERFORM dlock_internal.fail('22023', pg_catalog.format('info is %s bytes long, the limit is 1024 bytes', pg_catalog.octet_length(info)));
    END IF;
    PERFORM dlock_internal.check_wait(wait);
    PERFORM dlock_internal.check_lock_delay(lock_delay);
    RETURN dlock_internal.acquire(election, candidate, ttl, wait, 'e', NULL, lock_delay, info);
END
$$;

CREATE FUNCTION dlock_leader(election pg_catalog.text)
    RETURNS TABLE (info pg_catalog.text, term pg_catalog.int8, since pg_catalog.timestamptz, expires_at pg_catalog.timestamptz)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM dlock_internal.check_text('election', election, 1024);
    RETURN QUERY SELECT * FROM dlock_internal.leader(election);
END
$$;

CREATE FUNCTION dlock_try_acquire(key pg_catalog.text, owner pg_catalog.text, ttl pg_catalog.interval,
                                  settle pg_catalog.interval DEFAULT NULL)
    RETURNS TABLE (fence pg_catalog.int8, retry_after pg_catalog.interval)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM dlock_internal.check_text('key', key, 1024);
    PERFORM dlock_internal.check_text('owner', owner, 256);
    PERFORM dlock_internal.check_ttl(ttl);
    PERFORM dlock_internal.check_wait(settle, 'settle');
    RETURN QUERY SELECT * FROM dlock_internal.try_acquire(key, owner, ttl, settle);
END
$$;

CREATE FUNCTION dlock_renew(key pg_catalog.text, owner pg_catalog.text, ttl pg_catalog.interval)
    RETURNS pg_catalog.timestamptz LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM dlock_internal.check_text('key', key, 1024);
    PERFORM dlock_internal.check_text('owner', owner, 256);
    PERFORM dlock_internal.check_ttl(ttl, true);
    -- A refusal reaches the caller after the key lock is let go (see dlock_release).
    BEGIN
        RETURN dlock_internal.renew(key, owner, ttl);
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE;
    END;
END
$$;

-- The common case first: the caller's own live TTL lease in the key row, one UPDATE under
-- the key lock; anything else takes the general path.
-- In a block that catches the refusal (42501, another role's lease under this owner string):
-- the server sends an error to the client before it aborts the transaction, so a key lock the
-- transaction held would still be held when the caller hears of it, and a try that the caller
-- (or whoever it tells) sends at once would find the key busy. The block's subtransaction is
-- rolled back, its key lock with it, before the error goes on (as the native edition lets go
-- of the key before it refuses). It costs 11.5k instructions per pair on 15 (of 611k).
CREATE FUNCTION dlock_release(key pg_catalog.text, owner pg_catalog.text)
    RETURNS pg_catalog.bool LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    left_ pg_catalog.int4;
BEGIN
    BEGIN
        IF pg_catalog.octet_length(key) BETWEEN 1 AND 1024 AND pg_catalog.octet_length(owner) BETWEEN 1 AND 256 THEN
            -- The key lock, in an IF's condition: PL/pgSQL evaluates it without the executor, where
            -- a PERFORM runs a query (19k instructions more per release on 15).
            IF pg_catalog.pg_advisory_xact_lock(dlock_internal.key_lock(key)) IS NULL THEN
                RETURN NULL;   -- (never: the lock is taken, or the wait ends in an error)
            END IF;
            UPDATE dlock_internal.lease AS l
               SET hold_count = l.hold_count - 1,
                   owner = CASE WHEN l.hold_count > 1 THEN l.owner END,
                   role = CASE WHEN l.hold_count > 1 THEN l.role END,
                   holder_pid = CASE WHEN l.hold_count > 1 THEN l.holder_pid END,
                   info = CASE WHEN l.hold_count > 1 THEN l.info END,
                   expires_at = CASE WHEN l.hold_count > 1 THEN l.expires_at ELSE pg_catalog.clock_timestamp() END
             WHERE l.key = dlock_release.key AND l.holder = '' AND l.owner = dlock_release.owner
               AND l.hold_count > 0 AND l.role = dlock_internal.caller()
               AND l.expires_at > pg_catalog.clock_timestamp() AND l.expires_at <> 'infinity'::pg_catalog.timestamptz
            RETURNING l.hold_count INTO left_;
            IF left_ IS NOT NULL THEN
                -- The key's watchers, if any (dlock_internal.notify, its common case spelt out).
                IF left_ = 0 AND (NOT pg_catalog.pg_try_advisory_xact_lock(dlock_internal.watch_lock(key))
                                  OR pg_catalog.current_setting('dlock_sql.watching', true) = 'on') THEN
                    PERFORM dlock_internal.notify(key);
                END IF;
                RETURN true;
            END IF;
        END IF;
        PERFORM dlock_internal.check_text('key', key, 1024);
        PERFORM dlock_internal.check_text('owner', owner, 256);
        RETURN dlock_internal.release(key, owner);
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE;
    END;
END
$$;

CREATE FUNCTION dlock_release_all(owner pg_catalog.text)
    RETURNS pg_catalog.int4 LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM dlock_internal.check_text('owner', owner, 256);
    RETURN dlock_internal.release_all(owner);
END
$$;

CREATE FUNCTION dlock_force_release(key pg_catalog.text)
    RETURNS pg_catalog.bool LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM dlock_internal.check_text('key', key, 1024);
    RETURN dlock_internal.force_release(key);
END
$$;

CREATE FUNCTION dlock_holds(key pg_catalog.text, fence pg_catalog.int8)
    RETURNS pg_catalog.bool LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM dlock_internal.check_text('key', key, 1024);
    IF fence IS NULL THEN
        PERFORM dlock_internal.fail('22004', 'fence must not be NULL');
    END IF;
    RETURN dlock_internal.holds(key, fence);
END
$$;

CREATE FUNCTION dlock_wait_free(key pg_catalog.text, wait pg_catalog.interval)
    RETURNS pg_catalog.bool LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM dlock_internal.check_text('key', key, 1024);
    PERFORM dlock_internal.check_wait(wait);
    RETURN dlock_internal.wait_free(key, wait);
END
$$;

CREATE FUNCTION dlock_watch(key pg_catalog.text)
    RETURNS pg_catalog.text LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM dlock_internal.check_text('key', key, 1024);
    RETURN dlock_internal.watch(key);
END
$$;

CREATE FUNCTION dlock_unwatch(key pg_catalog.text)
    RETURNS pg_catalog.bool LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM dlock_internal.check_text('key', key, 1024);
    RETURN dlock_internal.unwatch(key);
END
$$;
