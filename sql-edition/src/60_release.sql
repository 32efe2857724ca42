-- Renew, release, release_all, force release (extension/src/ops/release.rs, renew.rs).

-- The caller's live lease of the key under p_owner: its row's holder, or NULL. Another role's
-- lease under that owner string is 42501 (p_action says what was refused), unless p_admin.
CREATE FUNCTION dlock_internal.own_lease(p_key pg_catalog.text, p_owner pg_catalog.text, p_role pg_catalog.oid,
                                         p_action pg_catalog.text, p_at pg_catalog.timestamptz)
    RETURNS dlock_internal.lease LANGUAGE plpgsql
AS $$
DECLARE
    r dlock_internal.lease;
BEGIN
    FOR r IN SELECT * FROM dlock_internal.lease AS l
              WHERE l.key = p_key AND l.owner = p_owner AND l.hold_count > 0 LOOP
        IF NOT dlock_internal.is_live(r, p_at) THEN
            CONTINUE;
        END IF;
        IF r.role IS DISTINCT FROM p_role AND NOT dlock_internal.is_admin(p_role) THEN
            PERFORM dlock_internal.fail('42501', 'permission denied to ' || p_action || ' a lease taken by another role',
                'A lease can be renewed or released only by the role that took it, or by a member of dlock_admin.');
        END IF;
        RETURN r;
    END LOOP;
    RETURN NULL;
END
$$;

-- Ends a lease's hold (all of them if p_all): a key row is marked free (keeping its fence),
-- an owner row deleted; the session's bound lock goes (after commit, 40_locks.sql) with a
-- session-bound lease of its own.
CREATE FUNCTION dlock_internal.drop_hold(r dlock_internal.lease, p_all pg_catalog.bool, p_at pg_catalog.timestamptz)
    RETURNS pg_catalog.bool LANGUAGE plpgsql
AS $$
BEGIN
    IF r.hold_count > 1 AND NOT p_all THEN
        UPDATE dlock_internal.lease AS l SET hold_count = l.hold_count - 1
         WHERE l.key = r.key AND l.holder = r.holder;
        RETURN false;
    END IF;
    IF r.holder = '' THEN
        UPDATE dlock_internal.lease AS l
           SET hold_count = 0, owner = NULL, role = NULL, holder_pid = NULL, info = NULL, expires_at = p_at
         WHERE l.key = r.key AND l.holder = '';
    ELSE
        DELETE FROM dlock_internal.lease AS l WHERE l.key = r.key AND l.holder = r.holder;
    END IF;
    IF r.expires_at = 'infinity' AND r.holder_pid = pg_catalog.pg_backend_pid() THEN
        PERFORM dlock_internal.unbind_later(r.key);
    END IF;
    PERFORM dlock_internal.notify(r.key);
    RETURN true;
END
$$;

CREATE FUNCTION dlock_internal.release(p_key pg_catalog.text, p_owner pg_catalog.text)
    RETURNS pg_catalog.bool LANGUAGE plpgsql
AS $$
DECLARE
    r dlock_internal.lease;
BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock(dlock_internal.key_lock(p_key));
    r := dlock_internal.own_lease(p_key, p_owner, dlock_internal.caller(), 'release', pg_catalog.clock_timestamp());
    IF r.key IS NULL THEN
        RETURN false;
    END IF;
    PERFORM dlock_internal.drop_hold(r, false, pg_catalog.clock_timestamp());
    RETURN true;
END
$$;

CREATE FUNCTION dlock_internal.renew(p_key pg_catalog.text, p_owner pg_catalog.text, p_ttl pg_catalog.interval)
    RETURNS pg_catalog.timestamptz LANGUAGE plpgsql
AS $$
DECLARE
    r dlock_internal.lease;
    now_ pg_catalog.timestamptz;
BEGIN
    PERFORM dlock_internal.check_no_shard_map();
    PERFORM pg_catalog.pg_advisory_xact_lock(dlock_internal.key_lock(p_key));
    now_ := pg_catalog.clock_timestamp();
    r := dlock_internal.own_lease(p_key, p_owner, dlock_internal.caller(), 'renew', now_);
    IF r.key IS NULL THEN
        RETURN NULL;
    END IF;
    IF r.expires_at = 'infinity' THEN
        RETURN 'infinity';
    END IF;
    UPDATE dlock_internal.lease AS l SET expires_at = now_ + p_ttl
     WHERE l.key = p_key AND l.holder = r.holder;
    IF now_ + p_ttl < r.expires_at THEN
        PERFORM dlock_internal.notify(p_key);   -- a shortening renew: the key may be free sooner
    END IF;
    PERFORM dlock_internal.durable_commit();
    RETURN now_ + p_ttl;
END
$$;

-- Every live lease of p_owner taken by the caller's role (any role's for an admin): the number
-- of keys. Keys are locked in key order, so two release_alls never deadlock.
CREATE FUNCTION dlock_internal.release_all(p_owner pg_catalog.text)
    RETURNS pg_catalog.int4 LANGUAGE plpgsql
AS $$
DECLARE
    role_ pg_catalog.oid := dlock_internal.caller();
    admin pg_catalog.bool := dlock_internal.is_admin(role_);
    k pg_catalog.text;
    r dlock_internal.lease;
    n pg_catalog.int4 := 0;
    freed pg_catalog.bool;
BEGIN
    FOR k IN SELECT DISTINCT l.key FROM dlock_internal.lease AS l
              WHERE l.owner = p_owner AND l.hold_count > 0 AND (admin OR l.role = role_)
              ORDER BY 1 LOOP
        PERFORM pg_catalog.pg_advisory_xact_lock(dlock_internal.key_lock(k));
        freed := false;
        FOR r IN SELECT * FROM dlock_internal.lease AS l
                  WHERE l.key = k AND l.owner = p_owner AND l.hold_count > 0 AND (admin OR l.role = role_) LOOP
            IF dlock_internal.is_live(r, pg_catalog.clock_timestamp()) THEN
                PERFORM dlock_internal.drop_hold(r, true, pg_catalog.clock_timestamp());
                freed := true;
            END IF;
        END LOOP;
        IF freed THEN
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;

-- Frees the key whatever its owners: dlock_admin members and superusers only (42501).
CREATE FUNCTION dlock_internal.force_release(p_key pg_catalog.text)
    RETURNS pg_catalog.bool LANGUAGE plpgsql
AS $$
DECLARE
    role_ pg_catalog.oid := dlock_internal.caller();
    r dlock_internal.lease;
    freed pg_catalog.bool := false;
BEGIN
    IF NOT dlock_internal.is_admin(role_) THEN
        PERFORM dlock_internal.fail('42501', 'permission denied for dlock_force_release',
            'Only superusers and members of role dlock_admin may call it.');
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(dlock_internal.key_lock(p_key));
    FOR r IN SELECT * FROM dlock_internal.lease AS l WHERE l.key = p_key AND l.hold_count > 0 LOOP
        IF dlock_internal.is_live(r, pg_catalog.clock_timestamp()) THEN
            PERFORM dlock_internal.drop_hold(r, true, pg_catalog.clock_timestamp());
            freed := true;
        END IF;
    END LOOP;
    IF freed THEN
        RAISE LOG 'dlock: % force-released key %', pg_catalog.pg_get_userbyid(role_), pg_catalog.quote_literal(p_key);
    END IF;
    RETURN freed;
END
$$;

-- The fencing check: a live lease of the key carries p_fence. A true answer pins the key (key
-- lock, share) until the transaction ends; for another role's lease only dlock_fencer and
-- dlock_admin members may do that (42501).
CREATE FUNCTION dlock_internal.holds(p_key pg_catalog.text, p_fence pg_catalog.int8)
    RETURNS pg_catalog.bool LANGUAGE plpgsql
AS $$
DECLARE
    role_ pg_catalog.oid;
    lease_role pg_catalog.oid;
BEGIN
    SELECT l.role INTO lease_role FROM dlock_internal.lease AS l
     WHERE l.key = p_key AND l.fence = p_fence AND dlock_internal.is_live(l, pg_catalog.clock_timestamp());
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    role_ := dlock_internal.caller();
    IF lease_role IS DISTINCT FROM role_ AND NOT dlock_internal.may_fence_others(role_) THEN
        PERFORM dlock_internal.fail('42501', 'permission denied to check the fence of a lease taken by another role',
            'A true dlock_holds keeps the key from changing hands until the transaction ends, which would hold up the lease''s role: only that role, members of dlock_fencer and of dlock_admin may do that.');
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(dlock_internal.key_lock(p_key));
    RETURN EXISTS (SELECT FROM dlock_internal.lease AS l
                    WHERE l.key = p_key AND l.fence = p_fence AND dlock_internal.is_live(l, pg_catalog.clock_timestamp()));
END
$$;
