-- dlock 0.1.0 -> 0.2.0 (ALTER EXTENSION dlock UPDATE). One transaction: if any statement fails,
-- nothing of it stays. Live leases, their fences and the settings are untouched: the lease
-- table and the fence sequence keep their rows and position.
\echo Use "ALTER EXTENSION dlock UPDATE TO '0.2.0'" to load this file. \quit

-- Identity: the functions run as their caller, so that dlock acts for the role PostgreSQL's own
-- privilege checks use (SET ROLE, a SECURITY DEFINER caller's owner, a table's owner during
-- ANALYZE or REFRESH); they switch to the extension's owner only for their own statements.
ALTER FUNCTION @extschema@.dlock_acquire(text, text, interval, interval) SECURITY INVOKER;
ALTER FUNCTION @extschema@.dlock_try_acquire(text, text, interval, interval) SECURITY INVOKER;
ALTER FUNCTION @extschema@.dlock_renew(text, text, interval) SECURITY INVOKER;
ALTER FUNCTION @extschema@.dlock_release(text, text) SECURITY INVOKER;
ALTER FUNCTION @extschema@.dlock_release_all(text) SECURITY INVOKER;
ALTER FUNCTION @extschema@.dlock_holds(text, bigint) SECURITY INVOKER;
ALTER FUNCTION @extschema@.dlock_force_release(text) SECURITY INVOKER;
ALTER FUNCTION @extschema@.dlock_watch(text) SECURITY INVOKER;
ALTER FUNCTION @extschema@.dlock_unwatch(text) SECURITY INVOKER;
ALTER FUNCTION dlock_internal.locks() SECURITY INVOKER;

-- Roles a DBA trusts to check other roles' fences with dlock_holds (which pins the key until
-- their transaction ends). Cluster-wide, like dlock_admin.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'dlock_fencer') THEN
        CREATE ROLE dlock_fencer NOLOGIN;
    END IF;
END
$$;

-- The database's owner (not only a superuser) may dump and restore the fence position.
GRANT USAGE ON SCHEMA dlock_internal TO pg_database_owner;
GRANT SELECT, UPDATE ON SEQUENCE dlock_internal.fence_seq TO pg_database_owner;

-- No comment on the extension itself: a database owner who does not own the extension could
-- not restore one from a dump.
COMMENT ON EXTENSION dlock IS NULL;

-- DROP EXTENSION dlock ends the waits under way instead of waiting for them to run out.
CREATE FUNCTION dlock_internal.end_waits_before_drop() RETURNS event_trigger
    LANGUAGE c SET search_path = pg_catalog, dlock_internal, pg_temp
    AS 'MODULE_PATHNAME', 'dlock_end_waits_before_drop';
CREATE EVENT TRIGGER dlock_end_waits_before_drop ON ddl_command_start
    WHEN TAG IN ('DROP EXTENSION')
    EXECUTE FUNCTION dlock_internal.end_waits_before_drop();

-- Contract version 2: a row per holder (shared leases, semaphores, elections), lock-delay.
-- Existing rows are exclusive leases without a lock-delay, which the defaults say.
ALTER TABLE dlock_internal.lease
    ADD COLUMN kind "char" NOT NULL DEFAULT 'x' CHECK (kind IN ('x', 's', 'e')),
    ADD COLUMN max_holders integer CHECK (max_holders > 0),
    ADD COLUMN lock_delay interval NOT NULL DEFAULT '0',
    ADD COLUMN info text,
    ALTER COLUMN key SET NOT NULL,
    DROP CONSTRAINT lease_pkey,
    ADD CONSTRAINT lease_pkey PRIMARY KEY (key, owner);

CREATE FUNCTION @extschema@.dlock_acquire(
    "key" text, "owner" text, "ttl" interval, "wait" interval, "lock_delay" interval
) RETURNS bigint VOLATILE PARALLEL UNSAFE
    SET search_path TO pg_catalog, dlock_internal, pg_temp
    LANGUAGE c AS 'MODULE_PATHNAME', 'dlock_acquire_with_lock_delay_wrapper';

CREATE FUNCTION @extschema@.dlock_acquire_shared(
    "key" text, "owner" text, "ttl" interval, "wait" interval DEFAULT '0 seconds',
    "max_holders" integer DEFAULT NULL, "lock_delay" interval DEFAULT '0 seconds'
) RETURNS bigint VOLATILE PARALLEL UNSAFE
    SET search_path TO pg_catalog, dlock_internal, pg_temp
    LANGUAGE c AS 'MODULE_PATHNAME', 'dlock_acquire_shared_wrapper';

CREATE FUNCTION @extschema@.dlock_acquire_all(
    "keys" text[], "owner" text, "ttl" interval, "wait" interval DEFAULT '0 seconds',
    "lock_delay" interval DEFAULT '0 seconds'
) RETURNS bigint[] VOLATILE PARALLEL UNSAFE
    SET search_path TO pg_catalog, dlock_internal, pg_temp
    LANGUAGE c AS 'MODULE_PATHNAME', 'dlock_acquire_all_wrapper';

CREATE FUNCTION @extschema@.dlock_campaign(
    "election" text, "candidate" text, "ttl" interval, "info" text DEFAULT NULL,
    "wait" interval DEFAULT NULL, "lock_delay" interval DEFAULT '0 seconds'
) RETURNS bigint VOLATILE PARALLEL UNSAFE
    SET search_path TO pg_catalog, dlock_internal, pg_temp
    LANGUAGE c AS 'MODULE_PATHNAME', 'dlock_campaign_wrapper';

CREATE FUNCTION @extschema@.dlock_leader("election" text)
RETURNS TABLE ("info" text, "term" bigint, "since" timestamptz, "expires_at" timestamptz)
    VOLATILE PARALLEL UNSAFE
    SET search_path TO pg_catalog, dlock_internal, pg_temp
    LANGUAGE c AS 'MODULE_PATHNAME', 'dlock_leader_wrapper';

CREATE FUNCTION @extschema@.dlock_wait_free("key" text, "wait" interval) RETURNS boolean
    VOLATILE PARALLEL UNSAFE
    SET search_path TO pg_catalog, dlock_internal, pg_temp
    LANGUAGE c AS 'MODULE_PATHNAME', 'dlock_wait_free_wrapper';

-- dlock_locks: a row per holder, with its mode, permits and lock-delay (new columns last, so
-- that queries written for 0.1.0 see what they saw).
CREATE FUNCTION dlock_internal.lock_rows()
RETURNS TABLE (
    "key" text, "owner" text, "fence" bigint, "hold_count" integer, "acquired_at" timestamptz,
    "expires_at" timestamptz, "holder_pid" integer, "holder_role" oid, "waiters" integer,
    "mode" text, "max_holders" integer, "lock_delay" interval
) STRICT VOLATILE PARALLEL UNSAFE
    SET search_path TO pg_catalog, dlock_internal, pg_temp
    LANGUAGE c AS 'MODULE_PATHNAME', 'lock_rows_wrapper';
CREATE OR REPLACE VIEW @extschema@.dlock_locks AS
SELECT key, owner, fence, hold_count, acquired_at, expires_at, holder_pid,
       pg_catalog.pg_get_userbyid(holder_role) AS holder_role, waiters, mode, max_holders, lock_delay
FROM dlock_internal.lock_rows();
DROP FUNCTION dlock_internal.locks();

-- Observability: counts per database in shared memory, and their reset.
CREATE FUNCTION dlock_internal.stats()
RETURNS TABLE ("database" oid, "since" timestamptz, "counter" text, "value" bigint)
    STRICT VOLATILE PARALLEL SAFE
    SET search_path TO pg_catalog, dlock_internal, pg_temp
    LANGUAGE c AS 'MODULE_PATHNAME', 'stats_wrapper';
CREATE FUNCTION @extschema@.dlock_stats_reset() RETURNS void
    STRICT VOLATILE PARALLEL UNSAFE
    SET search_path TO pg_catalog, dlock_internal, pg_temp
    LANGUAGE c AS 'MODULE_PATHNAME', 'dlock_stats_reset_wrapper';
-- What dlock did, per database, since the server started or dlock_stats_reset() (preloaded
-- only: without shared_preload_libraries = 'dlock' it has no rows). Waits: a cumulative
-- histogram (wait_buckets[i] waits took at most wait_le_ms[i] milliseconds), their count and
-- total. database is NULL for the counts shared by databases beyond the first 128.
CREATE VIEW @extschema@.dlock_stats AS
SELECT d.datname AS database, s.since,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'grants'::pg_catalog.text) AS grants,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'reentries'::pg_catalog.text) AS reentries,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'releases'::pg_catalog.text) AS releases,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'force_releases'::pg_catalog.text) AS force_releases,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'expiries'::pg_catalog.text) AS expiries,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'expiries_while_connected'::pg_catalog.text) AS expiries_while_connected,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'session_ends'::pg_catalog.text) AS session_ends,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'waits_started'::pg_catalog.text) AS waits_started,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'waits_granted'::pg_catalog.text) AS waits_granted,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'waits_timed_out'::pg_catalog.text) AS waits_timed_out,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'waits_cancelled'::pg_catalog.text) AS waits_cancelled,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'handoffs_direct'::pg_catalog.text) AS handoffs_direct,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'handoffs_self'::pg_catalog.text) AS handoffs_self,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'notifications'::pg_catalog.text) AS notifications,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_grants'::pg_catalog.text) AS fast_grants,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_reentries'::pg_catalog.text) AS fast_reentries,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_releases'::pg_catalog.text) AS fast_releases,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_expiries'::pg_catalog.text) AS fast_expiries,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_waits_started'::pg_catalog.text) AS fast_waits_started,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_waits_granted'::pg_catalog.text) AS fast_waits_granted,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_waits_timed_out'::pg_catalog.text) AS fast_waits_timed_out,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_waits_cancelled'::pg_catalog.text) AS fast_waits_cancelled,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_handoffs'::pg_catalog.text) AS fast_handoffs,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_count'::pg_catalog.text) AS wait_count,
       (pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_sum_us'::pg_catalog.text))::pg_catalog.numeric
           OPERATOR(pg_catalog./) 1000.0::pg_catalog.numeric AS wait_sum_ms,
       ARRAY[1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 'Infinity'::pg_catalog.float8]::pg_catalog.float8[] AS wait_le_ms,
       ARRAY[pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_1'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_2'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_5'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_10'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_25'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_50'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_100'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_250'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_500'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_1000'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_2500'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_5000'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_10000'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_30000'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_60000'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_inf'::pg_catalog.text)] AS wait_buckets,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_leases'::pg_catalog.text) AS fast_leases,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_capacity'::pg_catalog.text) AS fast_capacity
FROM dlock_internal.stats() AS s
LEFT JOIN pg_catalog.pg_database AS d ON d.oid OPERATOR(pg_catalog.=) s.database
GROUP BY s.database, d.datname, s.since;
GRANT SELECT ON @extschema@.dlock_stats TO PUBLIC;

-- Fast-mode fences: 0.1.0 drew their epochs from this database's fence sequence; 0.2.0 draws
-- them from the WAL position, from 2^42 on, which is above every epoch 0.1.0 drew only while
-- the sequence stayed below 2^42. (Last, so that a refusal here undoes the whole update.)
DO $$
BEGIN
    IF (SELECT last_value FROM dlock_internal.fence_seq) >= 4398046511104 THEN
        RAISE EXCEPTION 'dlock: the fence sequence of this database passed 2^42; 0.2.0''s fast-mode fences could be lower than 0.1.0''s'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Do not use fast mode''s fences of before and after the update together, or keep 0.1.0.';
    END IF;
END
$$;
