-- Every live lease (one row per holder: a key held shared has several), its mode, and how many
-- sessions wait on its key. Owners of other roles' leases are NULL unless the viewer is a
-- superuser or dlock_admin member.
CREATE VIEW dlock_locks AS
SELECT key, owner, fence, hold_count, acquired_at, expires_at, holder_pid,
       pg_catalog.pg_get_userbyid(holder_role) AS holder_role, waiters, mode, max_holders, lock_delay
FROM dlock_internal.lock_rows();
GRANT SELECT ON dlock_locks TO PUBLIC;


-- What dlock did, per database, since the server started or dlock_stats_reset() (preloaded
-- only: without shared_preload_libraries = 'dlock' it has no rows). Waits: a cumulative
-- histogram (wait_buckets[i] waits took at most wait_le_ms[i] milliseconds), their count and
-- total. database is NULL for the counts shared by databases beyond the first 128.
CREATE VIEW dlock_stats AS
SELECT d.datname AS database, s.since,
       max(value) FILTER (WHERE counter = 'grants') AS grants,
       max(value) FILTER (WHERE counter = 'reentries') AS reentries,
       max(value) FILTER (WHERE counter = 'releases') AS releases,
       max(value) FILTER (WHERE counter = 'force_releases') AS force_releases,
       max(value) FILTER (WHERE counter = 'expiries') AS expiries,
       max(value) FILTER (WHERE counter = 'expiries_while_connected') AS expiries_while_connected,
       max(value) FILTER (WHERE counter = 'session_ends') AS session_ends,
       max(value) FILTER (WHERE counter = 'waits_started') AS waits_started,
       max(value) FILTER (WHERE counter = 'waits_granted') AS waits_granted,
       max(value) FILTER (WHERE counter = 'waits_timed_out') AS waits_timed_out,
       max(value) FILTER (WHERE counter = 'waits_cancelled') AS waits_cancelled,
       max(value) FILTER (WHERE counter = 'handoffs_direct') AS handoffs_direct,
       max(value) FILTER (WHERE counter = 'handoffs_self') AS handoffs_self,
       max(value) FILTER (WHERE counter = 'notifications') AS notifications,
       max(value) FILTER (WHERE counter = 'fast_grants') AS fast_grants,
       max(value) FILTER (WHERE counter = 'fast_reentries') AS fast_reentries,
       max(value) FILTER (WHERE counter = 'fast_releases') AS fast_releases,
       max(value) FILTER (WHERE counter = 'fast_expiries') AS fast_expiries,
       max(value) FILTER (WHERE counter = 'fast_waits_started') AS fast_waits_started,
       max(value) FILTER (WHERE counter = 'fast_waits_granted') AS fast_waits_granted,
       max(value) FILTER (WHERE counter = 'fast_waits_timed_out') AS fast_waits_timed_out,
       max(value) FILTER (WHERE counter = 'fast_waits_cancelled') AS fast_waits_cancelled,
       max(value) FILTER (WHERE counter = 'fast_handoffs') AS fast_handoffs,
       max(value) FILTER (WHERE counter = 'wait_count') AS wait_count,
       (max(value) FILTER (WHERE counter = 'wait_sum_us')) / 1000.0 AS wait_sum_ms,
       ARRAY[1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 'Infinity'::float8]::float8[] AS wait_le_ms,
       ARRAY[max(value) FILTER (WHERE counter = 'wait_le_1'), max(value) FILTER (WHERE counter = 'wait_le_2'), max(value) FILTER (WHERE counter = 'wait_le_5'), max(value) FILTER (WHERE counter = 'wait_le_10'), max(value) FILTER (WHERE counter = 'wait_le_25'), max(value) FILTER (WHERE counter = 'wait_le_50'), max(value) FILTER (WHERE counter = 'wait_le_100'), max(value) FILTER (WHERE counter = 'wait_le_250'), max(value) FILTER (WHERE counter = 'wait_le_500'), max(value) FILTER (WHERE counter = 'wait_le_1000'), max(value) FILTER (WHERE counter = 'wait_le_2500'), max(value) FILTER (WHERE counter = 'wait_le_5000'), max(value) FILTER (WHERE counter = 'wait_le_10000'), max(value) FILTER (WHERE counter = 'wait_le_30000'), max(value) FILTER (WHERE counter = 'wait_le_60000'), max(value) FILTER (WHERE counter = 'wait_le_inf')] AS wait_buckets,
       max(value) FILTER (WHERE counter = 'fast_leases') AS fast_leases,
       max(value) FILTER (WHERE counter = 'fast_capacity') AS fast_capacity
FROM dlock_internal.stats() AS s
LEFT JOIN pg_catalog.pg_database AS d ON d.oid = s.database
GROUP BY s.database, d.datname, s.since;
GRANT SELECT ON dlock_stats TO PUBLIC;


-- No comment on the extension itself (the control file's shows in pg_available_extensions):
-- pg_dump would dump it, and its restore by a database owner who does not own the extension
-- (a managed service's administrator created it) would fail on COMMENT ON EXTENSION.
COMMENT ON EXTENSION dlock IS NULL;

-- DROP EXTENSION dlock while sessions wait: each waiting call keeps the lease table locked for
-- its transaction, so the drop would wait for every wait to run out. Before it takes any lock,
-- this trigger announces it and wakes every waiter, whose wait then ends with an error.
CREATE FUNCTION dlock_internal.end_waits_before_drop() RETURNS event_trigger
    LANGUAGE c SET search_path = pg_catalog, dlock_internal, pg_temp
    AS 'MODULE_PATHNAME', 'dlock_end_waits_before_drop';
CREATE EVENT TRIGGER dlock_end_waits_before_drop ON ddl_command_start
    WHEN TAG IN ('DROP EXTENSION')
    EXECUTE FUNCTION dlock_internal.end_waits_before_drop();
