-- Who is calling. The public functions run as their owner (SECURITY DEFINER), so current_user
-- is the installer there: the caller is the session's role as SET ROLE left it (the `role`
-- setting), or the session user. A role can only SET ROLE to roles it is a member of, so it can
-- only be taken for a role whose leases it could take anyway. (Declared difference: inside
-- another SECURITY DEFINER function the native edition sees that function's owner; this
-- edition sees the session's role.)
--
-- Not inside a security-restricted operation: there (an index expression or a materialized
-- view run by CREATE INDEX, ANALYZE, REFRESH, VACUUM or autovacuum) PostgreSQL runs the code as
-- the table's owner without changing the session's role, which may be a superuser's doing
-- maintenance on another role's table: taken for the caller, it would lend that role the
-- superuser's standing. A SECURITY DEFINER function cannot see the user it was called as, so
-- the edition refuses every call there (42501; the native edition acts as the table's owner).
-- It tells by UNLISTEN, which PostgreSQL refuses in such an operation and which costs nothing
-- otherwise (allowed in read-only transactions and on standbys).
CREATE FUNCTION dlock_internal.caller() RETURNS pg_catalog.oid
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    BEGIN
        UNLISTEN dlock_security_restricted_probe;
    EXCEPTION WHEN insufficient_privilege THEN
        PERFORM dlock_internal.fail('42501',
            'dlock refuses calls inside a security-restricted operation (an index expression, a materialized view, ANALYZE, VACUUM or autovacuum): the SQL edition cannot tell which role calls it there',
            'Call dlock from ordinary statements; the native extension acts as the table''s owner there.');
    END;
    -- Bound locks of leases released by earlier transactions (40_locks.sql).
    IF pg_catalog.current_setting('dlock_sql.unbind', true) <> '' THEN
        PERFORM dlock_internal.unbind_released();
    END IF;
    RETURN pg_catalog.quote_ident(CASE WHEN pg_catalog.current_setting('role') = 'none'
                                       THEN SESSION_USER::pg_catalog.text
                                       ELSE pg_catalog.current_setting('role') END)::pg_catalog.regrole::pg_catalog.oid;
END
$$;

-- The caller once, as an InitPlan: in the WHERE clause itself the volatile call ran once per
-- row of pg_roles (30-odd probes, each a subtransaction, per general-path acquire).
CREATE FUNCTION dlock_internal.caller_is_superuser() RETURNS pg_catalog.bool
    LANGUAGE sql VOLATILE
AS $$ SELECT COALESCE((SELECT a.rolsuper FROM pg_catalog.pg_roles AS a WHERE a.oid = (SELECT dlock_internal.caller())), false) $$;

-- Superusers and members of dlock_admin may act on every lease and see every owner.
CREATE FUNCTION dlock_internal.is_admin(p_role pg_catalog.oid) RETURNS pg_catalog.bool
    LANGUAGE sql STABLE
AS $$
    SELECT COALESCE((SELECT a.rolsuper FROM pg_catalog.pg_roles AS a WHERE a.oid = p_role), false)
        OR pg_catalog.pg_has_role(p_role, 'dlock_admin'::pg_catalog.name, 'MEMBER'::pg_catalog.text)
$$;

-- Roles trusted to pin other roles' fences with dlock_holds.
CREATE FUNCTION dlock_internal.may_fence_others(p_role pg_catalog.oid) RETURNS pg_catalog.bool
    LANGUAGE sql STABLE
AS $$
    SELECT dlock_internal.is_admin(p_role)
        OR pg_catalog.pg_has_role(p_role, 'dlock_fencer'::pg_catalog.name, 'MEMBER'::pg_catalog.text)
$$;
