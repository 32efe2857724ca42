-- dlock 0.2.0 -> 0.3.0 (ALTER EXTENSION dlock UPDATE). One transaction: if any statement fails,
-- nothing of it stays. Live leases, their fences and the settings are untouched.
\echo Use "ALTER EXTENSION dlock UPDATE TO '0.3.0'" to load this file. \quit

-- dlock_stats again, with every operator named OPERATOR(pg_catalog.x): 0.2.0's divided with a
-- bare `/`, which an operator of the installer's search_path could out-rank (pg_catalog has no
-- `/(bigint, numeric)`), binding it into the view for every later reader. Replacing the view
-- drops such a binding.
CREATE OR REPLACE VIEW @extschema@.dlock_stats AS
SELECT d.datname AS database, s.since,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'grants'::pg_catalog.text) AS grants,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'reentries'::pg_catalog.text) AS reentries,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'releases'::pg_catalog.text) AS releases,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'force_releases'::pg_catalog.text) AS force_releases,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'expiries'::pg_catalog.text) AS expiries,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'expiries_while_connected'::pg_catalog.text) AS expiries_while_connected,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'session_ends'::pg_catalog.text) AS session_ends,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'waits_started'::pg_catalog.text) AS waits_started,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'waits_granted'::pg_catalog.text) AS waits_granted,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'waits_timed_out'::pg_catalog.text) AS waits_timed_out,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'waits_cancelled'::pg_catalog.text) AS waits_cancelled,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'handoffs_direct'::pg_catalog.text) AS handoffs_direct,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'handoffs_self'::pg_catalog.text) AS handoffs_self,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'notifications'::pg_catalog.text) AS notifications,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_grants'::pg_catalog.text) AS fast_grants,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_reentries'::pg_catalog.text) AS fast_reentries,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_releases'::pg_catalog.text) AS fast_releases,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_expiries'::pg_catalog.text) AS fast_expiries,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_waits_started'::pg_catalog.text) AS fast_waits_started,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_waits_granted'::pg_catalog.text) AS fast_waits_granted,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_waits_timed_out'::pg_catalog.text) AS fast_waits_timed_out,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_waits_cancelled'::pg_catalog.text) AS fast_waits_cancelled,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_handoffs'::pg_catalog.text) AS fast_handoffs,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_count'::pg_catalog.text) AS wait_count,
       (pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_sum_us'::pg_catalog.text))::pg_catalog.numeric
           OPERATOR(pg_catalog./) 1000.0::pg_catalog.numeric AS wait_sum_ms,
       ARRAY[1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 'Infinity'::pg_catalog.float8]::pg_catalog.float8[] AS wait_le_ms,
       ARRAY[pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_1'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_2'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_5'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_10'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_25'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_50'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_100'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_250'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_500'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_1000'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_2500'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_5000'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_10000'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_30000'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_60000'::pg_catalog.text), pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'wait_le_inf'::pg_catalog.text)] AS wait_buckets,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_leases'::pg_catalog.text) AS fast_leases,
       pg_catalog.max(value) FILTER (WHERE counter OPERATOR(pg_catalog.=) 'fast_capacity'::pg_catalog.text) AS fast_capacity
FROM dlock_internal.stats() AS s
LEFT JOIN pg_catalog.pg_database AS d ON d.oid OPERATOR(pg_catalog.=) s.database
GROUP BY s.database, d.datname, s.since;

-- The lease table's new shape (extension/src/store/row.rs): a key row per key, updated in place
-- by the lock cycle (an exclusive lease or leader granted while nobody waits, marked free on
-- release), and owner rows for shared leases and grants to waiters. Live leases stay as they
-- are: each key's exclusive or leader row with the highest fence becomes its key row, every
-- other row an owner row. The partial index of session-bound rows goes (the sweep finds them
-- on the pages it reads: the index's predicate column would stop the key row's updates from
-- being HOT).
ALTER TABLE dlock_internal.lease ADD COLUMN holder pg_catalog.text COLLATE pg_catalog."C";
UPDATE dlock_internal.lease AS l SET holder = CASE
    WHEN l.kind OPERATOR(pg_catalog.<>) 's'::pg_catalog."char" AND NOT EXISTS (
        SELECT FROM dlock_internal.lease AS o
        WHERE o.key OPERATOR(pg_catalog.=) l.key AND o.kind OPERATOR(pg_catalog.<>) 's'::pg_catalog."char"
          AND o.fence OPERATOR(pg_catalog.>) l.fence)
    THEN ''::pg_catalog.text
    ELSE l.owner END;
ALTER TABLE dlock_internal.lease DROP CONSTRAINT lease_pkey;
ALTER TABLE dlock_internal.lease
    ALTER COLUMN holder SET NOT NULL,
    ALTER COLUMN owner DROP NOT NULL,
    ALTER COLUMN role DROP NOT NULL,
    ALTER COLUMN holder_pid DROP NOT NULL,
    -- No CHECK constraints any more (bootstrap.sql says why).
    DROP CONSTRAINT lease_hold_count_check,
    DROP CONSTRAINT lease_kind_check,
    DROP CONSTRAINT lease_max_holders_check,
    ADD CONSTRAINT lease_pkey PRIMARY KEY (key, holder),
    SET (fillfactor = 20);
DROP INDEX dlock_internal.lease_session_bound;

-- The C functions pin no search_path of their own any more: every statement they run pins it
-- around itself (wherever it runs, at commit too), and the lock cycle runs none, so a SET
-- clause only cost each call its save and restore.
ALTER FUNCTION @extschema@.dlock_acquire(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.interval) RESET search_path;
ALTER FUNCTION @extschema@.dlock_acquire(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.interval, pg_catalog.interval) RESET search_path;
ALTER FUNCTION @extschema@.dlock_acquire_all(pg_catalog.text[], pg_catalog.text, pg_catalog.interval, pg_catalog.interval, pg_catalog.interval) RESET search_path;
ALTER FUNCTION @extschema@.dlock_acquire_shared(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.interval, pg_catalog.int4, pg_catalog.interval) RESET search_path;
ALTER FUNCTION @extschema@.dlock_campaign(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.text, pg_catalog.interval, pg_catalog.interval) RESET search_path;
ALTER FUNCTION @extschema@.dlock_force_release(pg_catalog.text) RESET search_path;
ALTER FUNCTION @extschema@.dlock_holds(pg_catalog.text, pg_catalog.int8) RESET search_path;
ALTER FUNCTION @extschema@.dlock_leader(pg_catalog.text) RESET search_path;
ALTER FUNCTION @extschema@.dlock_release(pg_catalog.text, pg_catalog.text) RESET search_path;
ALTER FUNCTION @extschema@.dlock_release_all(pg_catalog.text) RESET search_path;
ALTER FUNCTION @extschema@.dlock_renew(pg_catalog.text, pg_catalog.text, pg_catalog.interval) RESET search_path;
ALTER FUNCTION @extschema@.dlock_stats_reset() RESET search_path;
ALTER FUNCTION @extschema@.dlock_try_acquire(pg_catalog.text, pg_catalog.text, pg_catalog.interval, pg_catalog.interval) RESET search_path;
ALTER FUNCTION @extschema@.dlock_unwatch(pg_catalog.text) RESET search_path;
ALTER FUNCTION @extschema@.dlock_wait_free(pg_catalog.text, pg_catalog.interval) RESET search_path;
ALTER FUNCTION @extschema@.dlock_watch(pg_catalog.text) RESET search_path;
ALTER FUNCTION dlock_internal.lock_rows() RESET search_path;
ALTER FUNCTION dlock_internal.stats() RESET search_path;

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

-- The shard map's functions (extension/src/api/shards.rs).
CREATE FUNCTION @extschema@."dlock_shard_drained"(
	"from_server" TEXT, /* Option < & str > */
	"epoch" bigint /* Option < i64 > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'dlock_shard_drained_wrapper';
CREATE FUNCTION @extschema@."dlock_shard_draining"(
	"epoch" bigint /* Option < i64 > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'dlock_shard_draining_wrapper';
CREATE FUNCTION @extschema@."dlock_shard_gates"() RETURNS TABLE (
	"from_server" TEXT,  /* String */
	"opens_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"open" bool  /* bool */
)
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'dlock_shard_gates_wrapper';
CREATE FUNCTION @extschema@."dlock_shard_install"(
	"me" TEXT, /* Option < & str > */
	"epoch" bigint, /* Option < i64 > */
	"servers" TEXT[], /* :: std :: option :: Option < Array < & str > > */
	"previous_epoch" bigint DEFAULT NULL, /* Option < i64 > */
	"previous_servers" TEXT[] DEFAULT NULL, /* :: std :: option :: Option < Array < & str > > */
	"force" bool DEFAULT false /* bool */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'dlock_shard_install_wrapper';
CREATE FUNCTION @extschema@."dlock_shard_status"() RETURNS TABLE (
	"me" TEXT,  /* String */
	"epoch" bigint,  /* i64 */
	"servers" TEXT[],  /* Vec < String > */
	"previous_epoch" bigint,  /* Option < i64 > */
	"previous_servers" TEXT[],  /* :: std :: option :: Option < Vec < String > > */
	"complete" bool  /* bool */
)
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'dlock_shard_status_wrapper';
CREATE FUNCTION @extschema@."dlock_shard_timer"(
	"from_server" TEXT, /* Option < & str > */
	"epoch" bigint, /* Option < i64 > */
	"delay" interval /* Option < Interval > */
) RETURNS timestamp with time zone /* Option < TimestampWithTimeZone > */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'dlock_shard_timer_wrapper';
