-- Who is calling. The public functions run as their owner (SECURITY DEFINER), so current_user
-- is the installer there: the caller is the session's role as SET ROLE left it (the `role`
-- setting), or the session user. A role can only SET ROLE to roles it is a member of, so it can
-- only be taken for a role whose leases it could take anyway. (Declared difference: inside
-- another SECURITY DEFINER function the native edition sees that function's owner; this
-- edition sees the session's role.)
CREATE FUNCTION dlock_internal.caller() RETURNS pg_catalog.oid
    LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.quote_ident(CASE WHEN pg_catalog.current_setting('role') = 'none'
                                       THEN SESSION_USER::pg_catalog.text
                                       ELSE pg_catalog.current_setting('role') END)::pg_catalog.regrole::pg_catalog.oid
$$;

CREATE FUNCTION dlock_internal.caller_is_superuser() RETURNS pg_catalog.bool
    LANGUAGE sql STABLE
AS $$ SELECT COALESCE((SELECT a.rolsuper FROM pg_catalog.pg_roles AS a WHERE a.oid = dlock_internal.caller()), false) $$;

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
