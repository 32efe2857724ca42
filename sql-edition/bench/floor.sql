-- The PL/pgSQL floor for make bench-sql-edition (waiters.sh): what any SQL-only lock table
-- behind closed doors pays per call, with none of dlock's rules. A table of the lease table's
-- shape (a row per key, written over in place) that PUBLIC cannot touch, and two SECURITY
-- DEFINER functions with a pinned search_path, each one UPDATE: take the key's row when it is
-- free or expired (under a try of an advisory lock of the key, as a try must not wait), and
-- free it. No role, queue, fence-history, expiry-horizon or notify rules, no sweep.
CREATE SCHEMA floor_bench;
CREATE TABLE floor_bench.lease (LIKE dlock_internal.lease INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES);
CREATE SEQUENCE floor_bench.fence_seq;
REVOKE ALL ON ALL TABLES IN SCHEMA floor_bench FROM PUBLIC;
INSERT INTO floor_bench.lease (key, fence, hold_count, acquired_at, expires_at, holder)
SELECT 'p' || i, 0, 0, now(), now(), '' FROM generate_series(0, 255) AS i;

CREATE FUNCTION public.floor_acquire(key text, owner text, ttl interval) RETURNS int8
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    granted int8;
BEGIN
    UPDATE floor_bench.lease AS l
       SET owner = floor_acquire.owner, hold_count = 1, expires_at = clock_timestamp() + ttl,
           fence = GREATEST(nextval('floor_bench.fence_seq'::regclass), l.fence + 1)
     WHERE l.key = floor_acquire.key AND l.holder = ''
       AND (l.hold_count = 0 OR l.expires_at <= clock_timestamp())
       AND pg_try_advisory_xact_lock(hashtextextended(floor_acquire.key, 1))
    RETURNING l.fence INTO granted;
    RETURN granted;
END
$$;

CREATE FUNCTION public.floor_release(key text, owner text) RETURNS bool
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE floor_bench.lease AS l
       SET owner = NULL, hold_count = 0, expires_at = clock_timestamp()
     WHERE l.key = floor_release.key AND l.holder = '' AND l.owner = floor_release.owner AND l.hold_count > 0;
    RETURN FOUND;
END
$$;
