-- dlock_locks: every live lease (one row per holder), its mode, and how many sessions wait on
-- its key (those queued on its queue lock). Owners of other roles' leases are NULL unless the
-- viewer is a superuser or dlock_admin member.
CREATE FUNCTION dlock_internal.lock_rows()
    RETURNS TABLE (key pg_catalog.text, owner pg_catalog.text, fence pg_catalog.int8, hold_count pg_catalog.int4,
                   acquired_at pg_catalog.timestamptz, expires_at pg_catalog.timestamptz, holder_pid pg_catalog.int4,
                   holder_role pg_catalog.oid, waiters pg_catalog.int4, mode pg_catalog.text,
                   max_holders pg_catalog.int4, lock_delay pg_catalog.interval)
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    WITH me AS (SELECT dlock_internal.caller() AS role),
         seer AS (SELECT me.role, dlock_internal.is_admin(me.role) AS admin FROM me),
         live AS (SELECT l.* FROM dlock_internal.lease AS l
                   WHERE l.hold_count > 0 AND dlock_internal.is_live(l, pg_catalog.clock_timestamp())),
         queued AS (SELECT k.classid, k.objid, pg_catalog.count(*)::pg_catalog.int4 AS n
                      FROM pg_catalog.pg_locks AS k
                     WHERE k.locktype = 'advisory' AND k.objsubid = 1 AND k.mode = 'ExclusiveLock'
                       AND k.database = (SELECT d.oid FROM pg_catalog.pg_database AS d
                                          WHERE d.datname = pg_catalog.current_database())
                     GROUP BY k.classid, k.objid)
    SELECT l.key,
           CASE WHEN s.admin OR l.role = s.role THEN l.owner END,
           l.fence, l.hold_count, l.acquired_at, l.expires_at, l.holder_pid, l.role,
           COALESCE((SELECT q.n FROM queued AS q, LATERAL (SELECT dlock_internal.queue_lock(l.key) AS h) AS x
                      WHERE q.classid = ((x.h >> 32) & 4294967295)::pg_catalog.oid
                        AND q.objid = (x.h & 4294967295)::pg_catalog.oid), 0),
           CASE WHEN l.kind = 's' THEN 'shared' ELSE 'exclusive' END,
           l.max_holders, l.lock_delay
      FROM live AS l, seer AS s
$$;

CREATE VIEW dlock_locks AS
SELECT key, owner, fence, hold_count, acquired_at, expires_at, holder_pid,
       pg_catalog.pg_get_userbyid(holder_role) AS holder_role, waiters, mode, max_holders, lock_delay
FROM dlock_internal.lock_rows();
GRANT SELECT ON dlock_locks TO PUBLIC;
