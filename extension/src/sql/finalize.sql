-- Every live lease, and how many sessions wait on its key. Owners of other roles' leases are
-- NULL unless the viewer is a superuser or dlock_admin member.
CREATE VIEW dlock_locks AS
SELECT key, owner, fence, hold_count, acquired_at, expires_at, holder_pid,
       pg_catalog.pg_get_userbyid(holder_role) AS holder_role, waiters
FROM dlock_internal.locks();
GRANT SELECT ON dlock_locks TO PUBLIC;


-- No comment on the extension itself (the control file's shows in pg_available_extensions):
-- pg_dump would dump it, and its restore by a database owner who does not own the extension
-- (a managed service's administrator created it) would fail on COMMENT ON EXTENSION.
COMMENT ON EXTENSION dlock IS NULL;
