-- dlock's private state. PUBLIC can neither read nor write it: every access goes through the
-- functions of this extension, which run their own statements on it as its owner.
--
-- Every name here that PostgreSQL would look up along the search_path is written with its
-- schema (operators as OPERATOR(pg_catalog.=)): this script runs under the installer's
-- search_path, where a role that may create objects in the target schema could have put an
-- operator that out-ranks pg_catalog's, to be bound into a view or a constraint for good.
CREATE SCHEMA dlock_internal;
REVOKE ALL ON SCHEMA dlock_internal FROM PUBLIC;

-- Fence tokens: one WAL-logged sequence, so a fence only ever grows, for every key, across
-- releases, expiries, crashes, restarts and failover to a synchronous standby.
CREATE SEQUENCE dlock_internal.fence_seq AS pg_catalog.int8 MINVALUE 1 NO CYCLE;
-- pg_dump carries its position along (a dump restored elsewhere must not hand out old fences
-- again); the leases themselves are not dumped: they belong to the running cluster.
SELECT pg_catalog.pg_extension_config_dump('dlock_internal.fence_seq', '');

-- The leases (extension/src/store/row.rs): a key row per key (holder ''), which outlives its
-- leases: an exclusive lease or an election's leader granted while nobody waits for the key is
-- written over it in place, and its release marks it free (hold_count 0, owner NULL), both HOT
-- updates (no indexed column changes; fillfactor leaves each page room for the new versions).
-- Shared leases, and grants to waiters, have owner rows (holder = owner), inserted and
-- deleted. Columns are in the order the updates from 0.1.0 and 0.2.0 leave them.
-- No CHECK constraints: dlock alone writes the table, and its tests hold it to the rules
-- (hold_count >= 0, kind one of 'x' 's' 'e', max_holders > 0 or NULL). The native direct path
-- never evaluates one, and SQL writes (the SQL edition's every grant and release) would parse
-- and plan each constraint again at every statement: 40k instructions per write on 15.
CREATE TABLE dlock_internal.lease (
    key         pg_catalog.text COLLATE pg_catalog."C" NOT NULL,  -- byte-exact: look-alikes stay distinct
    owner       pg_catalog.text COLLATE pg_catalog."C",           -- NULL: a free key row
    role        pg_catalog.oid,                         -- the role that took the lease
    fence       pg_catalog.int8 NOT NULL,               -- (a free key row keeps its last)
    hold_count  pg_catalog.int4 NOT NULL,               -- 0: free
    acquired_at pg_catalog.timestamptz NOT NULL,
    expires_at  pg_catalog.timestamptz NOT NULL,        -- 'infinity': bound to a session; free: since when
    holder_pid  pg_catalog.int4,
    -- exclusive, shared, leader
    kind        pg_catalog."char" NOT NULL DEFAULT 'x'::pg_catalog."char",
    max_holders pg_catalog.int4,                        -- a semaphore's permits (shared leases)
    lock_delay  pg_catalog.interval NOT NULL DEFAULT '0'::pg_catalog.interval,  -- the key stays held back this long after expiry
    info        pg_catalog.text,                        -- an election leader's info
    holder      pg_catalog.text COLLATE pg_catalog."C" NOT NULL,  -- '': the key row; else the owner
    CONSTRAINT lease_pkey PRIMARY KEY (key, holder)
) WITH (fillfactor = 20);
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
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'dlock_admin'::pg_catalog.name) THEN
        CREATE ROLE dlock_admin NOLOGIN;
    END IF;
END
$$;
-- Roles a DBA trusts to check other roles' fences with dlock_holds, which keeps the key from
-- changing hands until their transaction ends (a service that validates workers' tokens, say).
-- Cluster-wide, like dlock_admin.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'dlock_fencer'::pg_catalog.name) THEN
        CREATE ROLE dlock_fencer NOLOGIN;
    END IF;
END
$$;

-- Keys over several servers (extension/src/shards/): the newest shard map this server was
-- given, the one it replaced, and a gate per server of that one whose keys may have moved
-- here (opens_at NULL: closed). One row at most; no row: this server has no map. Not dumped:
-- a database restored from a dump has no map, so it refuses every sharded client (their epoch
-- is newer than its 0) until an operator's apply installs the map again; the fence sequence,
-- dumped, keeps the epoch's position.
CREATE TABLE dlock_internal.shard_map (
    only_row         pg_catalog.bool PRIMARY KEY DEFAULT true CHECK (only_row),
    me               pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    epoch            pg_catalog.int8 NOT NULL,
    servers          pg_catalog.text[] COLLATE pg_catalog."C" NOT NULL,
    previous_epoch   pg_catalog.int8,
    previous_servers pg_catalog.text[] COLLATE pg_catalog."C",
    installed_at     pg_catalog.timestamptz NOT NULL
);
CREATE TABLE dlock_internal.shard_gate (
    from_server pg_catalog.text COLLATE pg_catalog."C" PRIMARY KEY,
    opens_at    pg_catalog.timestamptz
);
REVOKE ALL ON dlock_internal.shard_map, dlock_internal.shard_gate FROM PUBLIC;
