-- Removes the SQL-only edition from a database: run by its installer (or a superuser) with the
-- schema of its public functions first on the search_path (SET search_path = dlock). The
-- leases and the fence position go with dlock_internal: move-to-native.sql keeps both.
-- The roles dlock_admin and dlock_fencer stay (cluster-wide, as with the native extension).
DROP VIEW dlock_locks;
DROP FUNCTION dlock_acquire(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.interval),
    dlock_acquire(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.interval, pg_catalog.interval),
    dlock_acquire_all(pg_catalog.text[], pg_catalog.text, pg_catalog.interval, pg_catalog.interval, pg_catalog.interval),
    dlock_acquire_shared(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.interval, pg_catalog.int4, pg_catalog.interval),
    dlock_campaign(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.text, pg_catalog.interval, pg_catalog.interval),
    dlock_leader(pg_catalog.text),
    dlock_try_acquire(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.interval),
    dlock_renew(pg_catalog.text, pg_catalog.text, pg_catalog.interval),
    dlock_release(pg_catalog.text, pg_catalog.text),
    dlock_release_all(pg_catalog.text),
    dlock_force_release(pg_catalog.text),
    dlock_holds(pg_catalog.text, pg_catalog.int8),
    dlock_wait_free(pg_catalog.text, pg_catalog.interval),
    dlock_watch(pg_catalog.text),
    dlock_unwatch(pg_catalog.text),
    dlock_sweep(pg_catalog.int4),
    dlock_fast_acquire(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.interval),
    dlock_fast_renew(pg_catalog.text, pg_catalog.text, pg_catalog.interval),
    dlock_fast_release(pg_catalog.text, pg_catalog.text),
    dlock_fast_holds(pg_catalog.text, pg_catalog.int8),
    dlock_fast_locks();
DROP SCHEMA dlock_internal CASCADE;
