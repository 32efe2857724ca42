-- dlock's private state. PUBLIC can neither read nor write it: every access goes through the
-- SECURITY DEFINER functions of this extension.
CREATE SCHEMA dlock_internal;
REVOKE ALL ON SCHEMA dlock_internal FROM PUBLIC;

-- Fence tokens: one WAL-logged sequence, so a fence only ever grows, for every key, across
-- releases, expiries, crashes, restarts and failover to a synchronous standby.
CREATE SEQUENCE dlock_internal.fence_seq AS bigint MINVALUE 1 NO CYCLE;
-- pg_dump carries its position along (a dump restored elsewhere must not hand out old fences
-- again); the leases themselves are not dumped: they belong to the running cluster.
SELECT pg_catalog.pg_extension_config_dump('dlock_internal.fence_seq', '');

CREATE TABLE dlock_internal.lease (
    key         text COLLATE "C" PRIMARY KEY,           -- byte-exact: look-alikes stay distinct
    owner       text COLLATE "C" NOT NULL,
    role        oid NOT NULL,                           -- the role that took the lease
    fence       bigint NOT NULL,
    hold_count  integer NOT NULL CHECK (hold_count > 0),
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,                   -- 'infinity': bound to a session
    holder_pid  integer NOT NULL
) WITH (fillfactor = 80);
CREATE INDEX lease_session_bound ON dlock_internal.lease (key) WHERE expires_at = 'infinity';
REVOKE ALL ON dlock_internal.lease, dlock_internal.fence_seq FROM PUBLIC;

-- Administrators may force-release any key and see every owner. A cluster-wide role: it
-- outlives DROP EXTENSION on purpose (grants to it may exist in other databases).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'dlock_admin') THEN
        CREATE ROLE dlock_admin NOLOGIN;
    END IF;
END
$$;
