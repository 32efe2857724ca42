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
