-- Fast mode (leases in shared memory) needs the native extension's shared library: present
-- with the native signatures, so that a program calling them gets a clear answer, 0A000.
CREATE FUNCTION dlock_internal.no_fast_mode() RETURNS void
    LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '0A000',
        MESSAGE = 'dlock: fast mode is not available in the SQL-only edition',
        HINT = 'Fast mode needs the native dlock extension (CREATE EXTENSION dlock, with shared_preload_libraries = ''dlock''); use dlock_acquire.';
END
$$;

CREATE FUNCTION dlock_fast_acquire(key pg_catalog.text, owner pg_catalog.text, ttl pg_catalog.interval,
                                   wait pg_catalog.interval DEFAULT '0 seconds'::pg_catalog.interval)
    RETURNS pg_catalog.int8 LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ BEGIN PERFORM dlock_internal.no_fast_mode(); RETURN NULL; END $$;
CREATE FUNCTION dlock_fast_renew(key pg_catalog.text, owner pg_catalog.text, ttl pg_catalog.interval)
    RETURNS pg_catalog.timestamptz LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ BEGIN PERFORM dlock_internal.no_fast_mode(); RETURN NULL; END $$;
CREATE FUNCTION dlock_fast_release(key pg_catalog.text, owner pg_catalog.text)
    RETURNS pg_catalog.bool LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ BEGIN PERFORM dlock_internal.no_fast_mode(); RETURN NULL; END $$;
CREATE FUNCTION dlock_fast_holds(key pg_catalog.text, fence pg_catalog.int8)
    RETURNS pg_catalog.bool LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ BEGIN PERFORM dlock_internal.no_fast_mode(); RETURN NULL; END $$;
CREATE FUNCTION dlock_fast_locks()
    RETURNS TABLE (key pg_catalog.text, owner pg_catalog.text, fence pg_catalog.int8, hold_count pg_catalog.int4,
                   expires_at pg_catalog.timestamptz, holder_role pg_catalog.oid)
    LANGUAGE plpgsql STRICT VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ BEGIN PERFORM dlock_internal.no_fast_mode(); END $$;
