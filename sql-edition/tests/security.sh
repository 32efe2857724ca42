#!/usr/bin/env bash
# What a managed service needs of the SQL edition: installed by a database owner who is not a
# superuser; every function pins search_path = pg_catalog, pg_temp; the internal schema, table,
# sequence and functions closed to PUBLIC; another role can neither release, renew nor see the
# owner of a lease, nor call the internal functions, nor pass for another role.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sqled_cluster security
trap sqled_destroy EXIT

q postgres "CREATE ROLE alice LOGIN; CREATE ROLE bob LOGIN; CREATE ROLE ops LOGIN; GRANT dlock_admin TO ops; CREATE ROLE checker LOGIN; GRANT dlock_fencer TO checker" >/dev/null

expect postgres "SELECT rolsuper FROM pg_roles WHERE rolname = 'app_owner'" f
# Every SECURITY DEFINER function of the edition pins exactly this search_path; the public ones
# are SECURITY DEFINER owned by the installer; the internal ones are not (but the view's, and
# the sweep that grants leave to their commit) and PUBLIC may not execute them (but the view's).
expect postgres "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
  WHERE (n.nspname = 'dlock_internal' OR (n.nspname = 'dlock' AND p.proname LIKE 'dlock\_%'))
    AND p.prosecdef AND p.proconfig IS DISTINCT FROM ARRAY['search_path=pg_catalog, pg_temp']" 0
expect postgres "SELECT string_agg(p.proname, ',' ORDER BY p.proname) FROM pg_proc p
  WHERE p.pronamespace = 'dlock_internal'::regnamespace AND p.prosecdef" lock_rows,sweep_at_commit
expect postgres "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
  WHERE n.nspname = 'dlock' AND (NOT p.prosecdef OR p.proowner <> 'app_owner'::regrole)" 0
expect postgres "SELECT string_agg(p.proname, ',') FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
  WHERE n.nspname = 'dlock_internal' AND has_function_privilege('public', p.oid, 'EXECUTE')" lock_rows
expect postgres "SELECT has_schema_privilege('public', 'dlock_internal', 'USAGE')" f
expect postgres "SELECT bool_or(has_table_privilege('public', c.oid, 'SELECT,INSERT,UPDATE,DELETE,TRUNCATE'))
  FROM pg_class c WHERE c.relnamespace = 'dlock_internal'::regnamespace AND c.relkind IN ('r','S')" f
# SQL-language functions name their parameters p_*: there a column of the same name wins over
# a parameter, which once made holds_advisory(pid, ...) see any backend's lock as its own.
expect postgres "SELECT coalesce(string_agg(DISTINCT p.proname, ','), '') FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace AND n.nspname IN ('dlock', 'dlock_internal')
  CROSS JOIN LATERAL unnest(p.proargnames, coalesce(p.proargmodes, array_fill('i'::\"char\", ARRAY[coalesce(cardinality(p.proargnames), 0)]))) AS a(name, mode)
  WHERE p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'sql')
    AND a.mode IN ('i', 'b', 'v') AND a.name <> '' AND a.name NOT LIKE 'p\\_%'" ""

# alice's lease; bob knows her owner string.
f=$(q alice "SELECT dlock_acquire('sec:k', 'alice-1', '1 hour')")
expect_error bob "SELECT dlock_release('sec:k', 'alice-1')" 42501 "permission denied to release a lease taken by another role"
expect_error bob "SELECT dlock_renew('sec:k', 'alice-1', '1 minute')" 42501 "permission denied to renew"
expect bob "SELECT dlock_release_all('alice-1')" 0
expect_error bob "SELECT dlock_force_release('sec:k')" 42501 "permission denied for dlock_force_release"
expect_error bob "SELECT dlock_holds('sec:k', $f)" 42501 "permission denied to check the fence"
expect bob "SELECT coalesce(owner, '(hidden)') || ' ' || holder_role FROM dlock_locks" "(hidden) alice"
expect alice "SELECT owner FROM dlock_locks" alice-1
expect ops "SELECT owner FROM dlock_locks" alice-1
expect checker "SELECT dlock_holds('sec:k', $f)" t
# The internal state and functions are out of bob's reach, directly and by pretending.
expect_error bob "SELECT * FROM dlock_internal.lease" 42501
expect_error bob "SELECT dlock_internal.release('sec:k', 'alice-1')" 42501
expect_error bob "SELECT dlock_internal.attempt('sec:k', 'x', NULL, 'x', NULL, '0', NULL, 'alice'::regrole, true)" 42501
expect_error bob "SELECT nextval('dlock_internal.fence_seq')" 42501
expect_error bob "SET ROLE alice" 42501
expect_error bob "UPDATE dlock.dlock_locks SET owner = 'bob'" 55000
# A role bob is a member of: its leases are bob's to release after SET ROLE (as natively).
q postgres "CREATE ROLE team; GRANT team TO bob" >/dev/null
expect bob "SET ROLE team; SELECT dlock_acquire('sec:team', 'team-1', '1 hour') IS NOT NULL" t
expect postgres "SELECT holder_role FROM dlock_locks WHERE key = 'sec:team'" team
expect_error bob "SELECT dlock_release('sec:team', 'team-1')" 42501
expect bob "SET ROLE team; SELECT dlock_release('sec:team', 'team-1')" t
# Admins act on anyone's leases.
expect ops "SELECT dlock_renew('sec:k', 'alice-1', '2 hours') > now() + interval '119 minutes'" t
expect ops "SELECT dlock_force_release('sec:k')" t
expect alice "SELECT dlock_holds('sec:k', $f)" f
# A temporary object of the caller's cannot stand in for the edition's (pg_temp is last, and
# never searched for functions or operators).
expect bob "CREATE TEMP TABLE lease (x int); CREATE FUNCTION pg_temp.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS \$\$ SELECT 'infinity'::timestamptz \$\$; SELECT dlock_acquire('sec:t', 'bob-1', '1 second') IS NOT NULL" t
sleep 1.2
expect alice "SELECT dlock_acquire('sec:t', 'alice-2', '1 minute') IS NOT NULL" t
# Fast mode: 0A000, naming the native extension.
expect_error alice "SELECT dlock_fast_acquire('f', 'o', '1 second')" 0A000 "native dlock extension"
# A try never blocks on a key another transaction is changing; a wait waits for it.
psql -X -q -U alice -d app -c "BEGIN" -c "SELECT dlock_acquire('sec:tx', 'a', '1 minute')" -c "SELECT pg_sleep(2)" -c "COMMIT" >/dev/null &
sleep 0.5
expect bob "SELECT dlock_acquire('sec:tx', 'b', '1 minute') IS NULL AND clock_timestamp() - statement_timestamp() < interval '200 ms'" t
wait
# Code another role gets run in a superuser's maintenance (an index expression at ANALYZE, a
# materialized view at REFRESH) runs as that role but in the superuser's session: refused
# (42501), not lent the superuser's standing. The control: the same probe, called by the
# superuser itself, does force the release.
q postgres "CREATE ROLE mallory LOGIN; CREATE SCHEMA mal AUTHORIZATION mallory" >/dev/null
expect alice "SELECT dlock_acquire('sec:victim', 'alice-v', '1 hour') IS NOT NULL" t
q mallory "CREATE FUNCTION mal.probe(x int) RETURNS int IMMUTABLE LANGUAGE plpgsql AS \$\$
  BEGIN
    BEGIN PERFORM dlock.dlock_force_release('sec:victim'); EXCEPTION WHEN insufficient_privilege THEN NULL; END;
    RETURN x;
  END \$\$;
  CREATE FUNCTION mal.take(x int) RETURNS int IMMUTABLE LANGUAGE plpgsql AS \$\$
  BEGIN PERFORM dlock.dlock_acquire('sec:mal', 'mal-1', '1 hour'); RETURN x; END \$\$;
  CREATE TABLE mal.t (x int); INSERT INTO mal.t SELECT generate_series(1, 10);
  CREATE INDEX ON mal.t (mal.probe(x));
  CREATE MATERIALIZED VIEW mal.mv AS SELECT mal.probe(1) AS x WITH NO DATA;
  CREATE MATERIALIZED VIEW mal.mv2 AS SELECT mal.take(1) AS x WITH NO DATA" >/dev/null
q postgres "ANALYZE mal.t; REFRESH MATERIALIZED VIEW mal.mv" >/dev/null
expect postgres "SELECT owner FROM dlock_locks WHERE key = 'sec:victim'" alice-v
expect_error postgres "REFRESH MATERIALIZED VIEW mal.mv2" 42501 "security-restricted operation"
expect postgres "SELECT count(*) FROM dlock_locks WHERE key = 'sec:mal'" 0
expect postgres "SELECT mal.probe(1)" 1
expect postgres "SELECT count(*) FROM dlock_locks WHERE key = 'sec:victim'" 0
# Outside such an operation a plain role's own calls go on as before, in a read-only
# transaction too.
expect mallory "SELECT dlock_acquire('sec:mal', 'mal-1', '1 minute') IS NOT NULL" t
expect mallory "BEGIN READ ONLY; SELECT count(*) FROM dlock_locks WHERE key = 'sec:mal'; COMMIT" 1
# The edition's locks live in the database's advisory-lock space, which every role may take
# with pg_advisory_lock. A role that holds them from outside can hold up a key (as an open
# transaction of the key would), but never a call past its limit: a bound lock held exclusively
# makes a session-bound acquire find the key busy (a TTL lease needs no bound lock); a held
# free-wait lock or deadlock-check lock holds up nothing. (A watch lock so held makes
# dlock_watch wait, as it waits for a release's commit.) Each call runs under a statement_timeout
# that would fail it with 57014 if it hung.
in_background mallory outside "SELECT pg_advisory_lock(hashtextextended(k COLLATE \"C\", s)) FROM (VALUES ('sec:out-bound', 7633), ('sec:out-free', 7636)) AS v(k, s);
  SELECT pg_advisory_lock(hashtextextended('dlock deadlock check', 7635))"
eventually postgres "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'outside' AND l.locktype = 'advisory'" 3
expect alice "SET statement_timeout = '5s'; SELECT coalesce(dlock_acquire('sec:out-bound', 'alice-o', NULL, '0')::text, 'busy')" busy
expect alice "SET statement_timeout = '5s'; SELECT coalesce(dlock_acquire('sec:out-bound', 'alice-o', NULL, '300 milliseconds')::text, 'busy')" busy
expect alice "SELECT dlock_acquire('sec:out-bound', 'alice-o', '1 minute') IS NOT NULL" t
expect alice "SELECT dlock_acquire('sec:out-free', 'alice-o', '1 minute') IS NOT NULL" t
expect bob "SET statement_timeout = '5s'; SELECT dlock_wait_free('sec:out-free', '300 milliseconds')" f
in_background app_owner bound-holder "SELECT dlock_acquire('sec:out-cycle', 'holder', NULL)"
eventually postgres "SELECT count(*) FROM dlock_locks WHERE key = 'sec:out-cycle'" 1
# (past deadlock_timeout, 1 s, when the head's cycle check finds its lock taken and skips)
expect bob "SET statement_timeout = '8s'; SELECT coalesce(dlock_acquire('sec:out-cycle', 'bob-o', '1 minute', '2500 milliseconds')::text, 'NULL')" NULL
end_sessions outside bound-holder
echo "security: all checks passed"
