-- Roles: a lease belongs to the role that took it; dlock_admin members and superusers may act
-- on anyone's; PUBLIC never touches the lease table.
\set SHOW_CONTEXT never
\pset null (null)
CREATE ROLE regress_alice;
CREATE ROLE regress_bob;
CREATE ROLE regress_ops;
GRANT dlock_admin TO regress_ops;

-- PUBLIC can neither read nor write the lease state directly.
SET ROLE regress_bob;
SELECT * FROM dlock_internal.lease;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO dlock_internal.lease DEFAULT VALUES;
\echo :LAST_ERROR_SQLSTATE
DELETE FROM dlock_internal.lease;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT has_table_privilege('regress_bob', 'dlock_internal.lease', 'SELECT') AS bob_select,
       has_table_privilege('regress_bob', 'dlock_internal.lease', 'INSERT, UPDATE, DELETE, TRUNCATE')
         AS bob_write,
       has_table_privilege('regress_ops', 'dlock_internal.lease', 'SELECT, INSERT, UPDATE, DELETE')
         AS ops_any;

-- alice takes a lease.
SET ROLE regress_alice;
SELECT dlock_acquire('roles:k', 'alice-1', '1 hour') AS f \gset
SELECT key, owner, hold_count, holder_role FROM dlock_locks;
RESET ROLE;

-- bob knows alice's owner string but is another role: renew and release fail with 42501.
SET ROLE regress_bob;
SELECT dlock_renew('roles:k', 'alice-1', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release('roles:k', 'alice-1');
\echo :LAST_ERROR_SQLSTATE
-- release_all frees only the caller's role's leases.
SELECT dlock_release_all('alice-1') AS bob_released_keys;
-- force_release is for dlock_admin members and superusers.
SELECT dlock_force_release('roles:k');
\echo :LAST_ERROR_SQLSTATE
-- bob sees the lease but not its owner; a try with his own owner string is refused.
SELECT key, owner, fence = :f AS same_fence, hold_count, holder_role FROM dlock_locks;
SELECT dlock_acquire('roles:k', 'bob-1', '1 minute') IS NULL AS bob_refused;
-- Presenting alice's owner string does not make bob's acquire reentrant: the key is busy.
SELECT dlock_acquire('roles:k', 'alice-1', '1 minute') IS NULL AS bob_as_alice_refused;
-- A true dlock_holds pins the key until the checker's transaction ends, so checking another
-- role's fence takes dlock_fencer (42501 otherwise, and nothing is pinned); a fence no live
-- lease carries is simply false.
SELECT dlock_holds('roles:k', :f) AS bob_checks_fence;
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_holds('roles:k', :f + 1) AS bob_checks_a_wrong_fence;
RESET ROLE;
GRANT dlock_fencer TO regress_bob;
SET ROLE regress_bob;
SELECT dlock_holds('roles:k', :f) AS fencer_bob_checks_fence;
RESET ROLE;
REVOKE dlock_fencer FROM regress_bob;

-- Nothing changed for alice.
SET ROLE regress_alice;
SELECT key, owner, fence = :f AS same_fence, hold_count,
       expires_at > now() + interval '59 minutes' AS ttl_untouched
  FROM dlock_locks;
RESET ROLE;

-- Owners are masked per role: each role sees its own owners, NULL for the others'.
SET ROLE regress_bob;
SELECT dlock_acquire('roles:b', 'bob-1', '1 hour') IS NOT NULL AS bob_granted;
SELECT key, owner, holder_role FROM dlock_locks ORDER BY key;
RESET ROLE;
SET ROLE regress_alice;
SELECT key, owner, holder_role FROM dlock_locks ORDER BY key;
RESET ROLE;
-- dlock_admin members and superusers see every owner.
SET ROLE regress_ops;
SELECT key, owner, holder_role FROM dlock_locks ORDER BY key;
RESET ROLE;
SELECT key, owner, holder_role FROM dlock_locks ORDER BY key;

-- A dlock_admin member may renew and release another role's lease, and force-release any key.
SET ROLE regress_ops;
SELECT dlock_renew('roles:k', 'alice-1', '2 hours') > now() + interval '119 minutes' AS ops_renewed;
SELECT dlock_release('roles:k', 'alice-1') AS ops_released;
SELECT dlock_force_release('roles:b') AS ops_forced;
SELECT dlock_force_release('roles:b') AS ops_forced_free_key;
SELECT count(*) AS leases FROM dlock_locks;
RESET ROLE;

-- force_release frees the key whatever its hold count; the next grant has a larger fence.
SET ROLE regress_alice;
SELECT dlock_acquire('roles:k', 'alice-1', '1 hour') AS f2 \gset
SELECT dlock_acquire('roles:k', 'alice-1', '1 hour') = :f2 AS reentrant;
RESET ROLE;
SELECT :f2 > :f AS "f2 > f";
SELECT dlock_force_release('roles:k') AS superuser_forced;
SET ROLE regress_alice;
SELECT dlock_release('roles:k', 'alice-1') AS alice_release_after_force;
SELECT dlock_holds('roles:k', :f2) AS alice_fence_after_force;
SELECT dlock_acquire('roles:k', 'alice-1', '1 hour') > :f2 AS next_fence_larger;
RESET ROLE;

-- release_all by a dlock_admin member frees that owner's leases of every role.
SET ROLE regress_bob;
SELECT dlock_acquire('roles:c', 'alice-1', '1 hour') IS NOT NULL AS bob_uses_same_owner_string;
RESET ROLE;
SELECT key, owner, holder_role FROM dlock_locks ORDER BY key;
SET ROLE regress_ops;
SELECT dlock_release_all('alice-1') AS ops_released_keys;
RESET ROLE;
SELECT count(*) AS leases FROM dlock_locks;

DROP ROLE regress_alice;
DROP ROLE regress_bob;
DROP ROLE regress_ops;
