-- dlock's private state. PUBLIC can neither read nor write it: every access goes through the
-- functions of this extension, which run their own statements on it as its owner.
CREATE SCHEMA dlock_internal;
REVOKE ALL ON SCHEMA dlock_internal FROM PUBLIC;

-- Fence tokens: one WAL-logged sequence, so a fence only ever grows, for every key, across
-- releases, expiries, crashes, restarts and failover to a synchronous standby.
CREATE SEQUENCE dlock_internal.fence_seq AS bigint MINVALUE 1 NO CYCLE;
-- pg_dump carries its position along (a dump restored elsewhere must not hand out old fences
-- again); the leases themselves are not dumped: they belong to the running cluster.
SELECT pg_catalog.pg_extension_config_dump('dlock_internal.fence_seq', '');

-- One row per holder of a key: one exclusive lease (or an election's leader), or any number
-- of shared ones.
CREATE TABLE dlock_internal.lease (
    key         text COLLATE "C" NOT NULL,              -- byte-exact: look-alikes stay distinct
    owner       text COLLATE "C" NOT NULL,
    role        oid NOT NULL,                           -- the role that took the lease
    fence       bigint NOT NULL,
    hold_count  integer NOT NULL CHECK (hold_count > 0),
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,                   -- 'infinity': bound to a session
    holder_pid  integer NOT NULL,
    kind        "char" NOT NULL DEFAULT 'x' CHECK (kind IN ('x', 's', 'e')),  -- exclusive, shared, leader
    max_holders integer CHECK (max_holders > 0),        -- a semaphore's permits (shared leases)
    lock_delay  interval NOT NULL DEFAULT '0',          -- the key stays held back this long after expiry
    info        text,                                   -- an election leader's info
    CONSTRAINT lease_pkey PRIMARY KEY (key, owner)
) WITH (fillfactor = 80);
CREATE INDEX lease_session_bound ON dlock_internal.lease (key) WHERE expires_at = 'infinity';
REVOKE ALL ON dlock_internal.lease, dlock_internal.fence_seq FROM PUBLIC;
-- The database's owner (not only a superuser) may dump and restore the fence position with
-- pg_dump: reading it and setting it (setval) are all it may do here. Setting it back would let
-- fences repeat in this database, as restoring an old dump over a live one would.
GRANT USAGE ON SCHEMA dlock_internal TO pg_database_owner;
GRANT SELECT, UPDATE ON SEQUENCE dlock_internal.fence_seq TO pg_database_owner;

-- Administrators may force-release any key and see every owner. A cluster-wide role: it
-- outlives DROP EXTENSION on purpose (grants to it may exist in other databases).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'dlock_admin') THEN
        CREATE ROLE dlock_admin NOLOGIN;
    END IF;
END
$$;
-- Roles a DBA trusts to check other roles' fences with dlock_holds, which keeps the key from
-- changing hands until their transaction ends (a service that validates workers' tokens, say).
-- Cluster-wide, like dlock_admin.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'dlock_fencer') THEN
        CREATE ROLE dlock_fencer NOLOGIN;
    END IF;
END
$$;
