-- Raising the contract's errors (core/src/error.rs, extension/src/pg/report.rs): the same
-- SQLSTATE, message ("dlock: " + the core's Display) and hint as the native edition.
CREATE FUNCTION dlock_internal.fail(code pg_catalog.text, message pg_catalog.text,
                                    hint pg_catalog.text DEFAULT NULL)
    RETURNS void LANGUAGE plpgsql
AS $$
BEGIN
    IF hint IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = 'dlock: ' || message;
    END IF;
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = 'dlock: ' || message, HINT = hint;
END
$$;

-- A session that routes with a shard map (dlock.shard_epoch, which sharded clients set): this
-- edition has no map (keys over several servers is the native extension's), so it refuses the
-- session's grants and renewals as a native server without a map does (0F000), rather than
-- grant a key that may be another server's.
CREATE FUNCTION dlock_internal.check_no_shard_map() RETURNS void LANGUAGE plpgsql
AS $$
DECLARE
    given pg_catalog.text := COALESCE(pg_catalog.current_setting('dlock.shard_epoch', true), '');
BEGIN
    IF given <> '' AND given <> '0' THEN
        PERFORM dlock_internal.fail('0F000',
            pg_catalog.format('this server has shard map epoch 0, older than the caller''s epoch %s', given),
            'The operator''s apply of the newer map has not reached this server yet: retry when '
            '`dlock shards apply` has installed it here.');
    END IF;
END
$$;

-- A key, owner, election or candidate: not NULL (22004), not empty, at most max bytes (22023).
CREATE FUNCTION dlock_internal.check_text(arg pg_catalog.text, value pg_catalog.text, max pg_catalog.int4)
    RETURNS void LANGUAGE plpgsql
AS $$
DECLARE
    len pg_catalog.int4;
BEGIN
    IF value IS NULL THEN
        PERFORM dlock_internal.fail('22004', arg || ' must not be NULL');
    END IF;
    len := pg_catalog.octet_length(value);
    IF len = 0 THEN
        PERFORM dlock_internal.fail('22023', arg || ' must not be empty');
    ELSIF len > max THEN
        PERFORM dlock_internal.fail('22023', pg_catalog.format('%s is %s bytes long, the limit is %s bytes', arg, len, max),
            CASE WHEN arg = 'key' THEN 'Hash long names on the client, e.g. with sha256.' END);
    END IF;
END
$$;

-- The text dlock.max_ttl is shown as in messages ("1 day", "10s", "36 hours").
CREATE FUNCTION dlock_internal.max_ttl_text() RETURNS pg_catalog.text
    LANGUAGE plpgsql STABLE
AS $$
DECLARE
    own pg_catalog.text := pg_catalog.current_setting('dlock.max_ttl', true);
BEGIN
    IF own IS NOT NULL AND own <> '' AND dlock_internal.caller_is_superuser() THEN
        RETURN own;
    END IF;
    RETURN (SELECT s.max_ttl FROM dlock_internal.settings AS s);
END
$$;

-- dlock.max_ttl: the settings table's, or a superuser session's own SET dlock.max_ttl.
CREATE FUNCTION dlock_internal.max_ttl() RETURNS pg_catalog.interval
    LANGUAGE sql STABLE
AS $$ SELECT dlock_internal.max_ttl_text()::pg_catalog.interval $$;

-- A ttl: NULL is session-bound (unless required); else 0 < ttl <= dlock.max_ttl.
CREATE FUNCTION dlock_internal.check_ttl(ttl pg_catalog.interval, required pg_catalog.bool DEFAULT false)
    RETURNS void LANGUAGE plpgsql
AS $$
BEGIN
    IF ttl IS NULL THEN
        IF required THEN
            PERFORM dlock_internal.fail('22004', 'ttl must not be NULL',
                'A session-bound lease (acquired with ttl NULL) needs no renewal.');
        END IF;
        RETURN;
    END IF;
    IF ttl <= '0'::interval THEN
        PERFORM dlock_internal.fail('22023', 'ttl must be positive', 'Use ttl => NULL for a lease bound to this session.');
    END IF;
    IF ttl > dlock_internal.max_ttl() THEN
        PERFORM dlock_internal.fail('22023', 'ttl exceeds dlock.max_ttl (' || dlock_internal.max_ttl_text() || ')',
            'Renew the lease before it runs out, or have a superuser raise dlock.max_ttl.');
    END IF;
END
$$;

-- A wait (or settle): NULL waits without limit; never negative.
CREATE FUNCTION dlock_internal.check_wait(wait pg_catalog.interval, arg pg_catalog.text DEFAULT 'wait')
    RETURNS void LANGUAGE plpgsql
AS $$
BEGIN
    IF wait < '0'::interval THEN
        PERFORM dlock_internal.fail('22023', arg || ' must not be negative',
            pg_catalog.format('Use %s => ''0'' to try once, or %s => NULL to wait without limit.', arg, arg));
    END IF;
END
$$;

-- A lock-delay: required, not negative, at most dlock.max_ttl.
CREATE FUNCTION dlock_internal.check_lock_delay(lock_delay pg_catalog.interval)
    RETURNS void LANGUAGE plpgsql
AS $$
BEGIN
    IF lock_delay IS NULL THEN
        PERFORM dlock_internal.fail('22004', 'lock_delay must not be NULL');
    ELSIF lock_delay < '0'::interval THEN
        PERFORM dlock_internal.fail('22023', 'lock_delay must not be negative',
            'lock_delay => ''0'' (the default) frees the key as soon as the lease expires.');
    ELSIF lock_delay > dlock_internal.max_ttl() THEN
        PERFORM dlock_internal.fail('22023', 'lock_delay exceeds dlock.max_ttl (' || dlock_internal.max_ttl_text() || ')',
            'A lock-delay is at most dlock.max_ttl; a superuser may raise it.');
    END IF;
END
$$;

-- max_holders: NULL (no limit) or at least 1.
CREATE FUNCTION dlock_internal.check_max_holders(max_holders pg_catalog.int4)
    RETURNS void LANGUAGE plpgsql
AS $$
BEGIN
    IF max_holders < 1 THEN
        PERFORM dlock_internal.fail('22023', 'max_holders must be at least 1, not ' || max_holders,
            'max_holders => NULL takes the key shared without a limit.');
    END IF;
END
$$;
