-- Every live lease (one row per holder: a key held shared has several), its mode, and how many
-- sessions wait on its key. Owners of other roles' leases are NULL unless the viewer is a
-- superuser or dlock_admin member.
CREATE VIEW dlock_locks AS
SELECT key, owner, fence, hold_count, acquired_at, expires_at, holder_pid,
       pg_catalog.pg_get_userbyid(holder_role) AS holder_role, waiters, mode, max_holders, lock_delay
FROM dlock_internal.lock_rows();
GRANT SELECT ON dlock_locks TO PUBLIC;


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
