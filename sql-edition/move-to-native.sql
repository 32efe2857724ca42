-- Moves a database from the SQL-only edition to the native extension, in place (psql script):
--     psql -v schema=dlock -f move-to-native.sql
-- by a superuser (CREATE EXTENSION dlock needs one) on a server where the native extension is
-- installed. The same after a dump of an SQL-edition database was restored on such a server.
-- In one transaction, with the lease table locked: the fence position (the sequence's and the
-- largest fence of any row, so fences keep growing) and the rows of TTL leases are carried
-- over into the native extension's table of the same shape. Session-bound leases end (their
-- sessions' locks are the SQL edition's); their keys keep their fences.
\set ON_ERROR_STOP on
BEGIN;
SET LOCAL search_path = :"schema";
LOCK TABLE dlock_internal.lease IN ACCESS EXCLUSIVE MODE;
CREATE TEMP TABLE dlock_move_rows ON COMMIT DROP AS
    SELECT * FROM dlock_internal.lease AS l WHERE l.expires_at <> 'infinity'::pg_catalog.timestamptz OR l.holder = '';
UPDATE dlock_move_rows SET hold_count = 0, owner = NULL, role = NULL, holder_pid = NULL, info = NULL,
                           expires_at = pg_catalog.clock_timestamp()
 WHERE expires_at = 'infinity'::pg_catalog.timestamptz;
SELECT GREATEST((SELECT s.last_value FROM dlock_internal.fence_seq AS s),
                (SELECT pg_catalog.max(r.fence) FROM dlock_move_rows AS r), 1) AS dlock_fence_floor \gset
\ir uninstall.sql
CREATE EXTENSION dlock SCHEMA :"schema";
INSERT INTO dlock_internal.lease SELECT * FROM dlock_move_rows;
SELECT pg_catalog.setval('dlock_internal.fence_seq'::pg_catalog.regclass, :dlock_fence_floor);
COMMIT;
