#!/usr/bin/env bash
# `make demo-sql`: the SQL-only edition as a managed service's user meets it, in about ten
# seconds. A throwaway PostgreSQL 15 cluster in $BUILD/sql-edition/demo with no dlock library at
# all; the database's owner (no superuser, as on Cloud SQL, Azure or Neon) runs the one SQL file
# as a migration. Then: a race, a wait inside one statement (in the lock manager, never a busy
# loop), an expiry takeover with fencing, a release refused to the wrong role, a NOTIFY to a
# watcher, fast mode's answer, and the sweep.
source "$(dirname "${BASH_SOURCE[0]}")/tests/lib.sh"
dir=$BUILD/sql-edition/demo

file=$(OUT=$BUILD/sql-edition bash "$SQLED/build.sh" | tail -n 1)
bash "$CLUSTER_SH" destroy "$dir"
trap 'bash "$CLUSTER_SH" stop "$dir" fast' EXIT
eval "$(bash "$CLUSTER_SH" start "$dir")"
export PGHOST PGPORT

# One psql session reading SQL from stdin as USER ($1) in database app.
sql() { local user=$1; shift; psql -X -q -v ON_ERROR_STOP=1 -P footer=off -P null=NULL -U "$user" -d app "$@"; }
ask() { local user=$1; shift; psql -X -q -At -v ON_ERROR_STOP=1 -U "$user" -d app "$@"; }

psql -X -q -v ON_ERROR_STOP=1 -U postgres -d postgres \
  -c "CREATE ROLE app_owner LOGIN CREATEROLE" -c "CREATE DATABASE app OWNER app_owner" >/dev/null
echo
echo "== dlock, the SQL-only edition: no shared library, no superuser"
echo
echo "-- 0. The database's owner (rolsuper = false) runs one file as a migration:"
echo "--    psql -d app -c 'CREATE SCHEMA dlock' -c 'SET search_path = dlock' -f ${file##*/}"
sql app_owner -c "CREATE SCHEMA dlock" -c "GRANT USAGE ON SCHEMA dlock TO PUBLIC" \
  -c "SET search_path = dlock" -f "$file" >/dev/null
sql app_owner <<'SQL'
SELECT dlock_internal.edition() AS edition,
       (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS installer_is_superuser,
       (SELECT count(*) FROM pg_extension WHERE extname = 'dlock') AS native_extensions;
\echo
\echo '-- 1. Two workers race for the nightly report: one gets a fencing token, the other NULL at once.'
SQL
for worker in worker-A worker-B; do
  ask app_owner -v worker="$worker" <<<"SELECT format('   %s: dlock.dlock_acquire(''report:nightly'', ...) -> %s', :'worker',
            coalesce('fence ' || dlock.dlock_acquire('report:nightly', :'worker', '1 minute'),
                     'NULL (someone else holds it)'))" &
done
wait
winner=$(ask app_owner <<<"SELECT owner FROM dlock.dlock_locks WHERE key = 'report:nightly'")
loser=worker-B
[ "$winner" = worker-B ] && loser=worker-A

echo
echo "-- 2. The loser waits inside one statement (wait => 10s). A function cannot hear NOTIFY while"
echo "--    it runs: the first waiter looks again after a short sleep (1 to 10 ms), and any others"
echo "--    queue behind it in the lock manager (Lock/advisory), first come first served."
ask app_owner -v loser="$loser" <<<"SELECT format('   %s waited %s s and got fence %s', :'loser',
          to_char(extract(epoch FROM clock_timestamp() - statement_timestamp()), 'FM990.00'), f)
   FROM (SELECT dlock.dlock_acquire('report:nightly', :'loser', '30 seconds', wait => '10 seconds') AS f) AS g" &
waiter=$!
sleep 1
sql postgres -v winner="$winner" <<'SQL'
\echo '   while it waits: what pg_stat_activity and dlock.dlock_locks say'
SELECT wait_event_type, wait_event, state FROM pg_stat_activity
 WHERE query LIKE '%wait => %' AND pid <> pg_backend_pid();
SELECT key, owner, fence, waiters FROM dlock.dlock_locks WHERE key = 'report:nightly';
\echo '   ' :winner 'releases:'
SELECT dlock.dlock_release('report:nightly', :'winner') AS released;
SQL
wait "$waiter"

sql app_owner <<'SQL'
\echo
\echo '-- 3. Expiry takeover: worker-A takes a 1-second lease and stalls past it; worker-B takes the'
\echo '--    key with a larger fence, and worker-A''s late release and fenced write do nothing.'
SELECT dlock.dlock_acquire('cron:cleanup', 'worker-A', '1 second') AS fence_a \gset
SELECT pg_sleep(1.5) \g /dev/null
SELECT dlock.dlock_acquire('cron:cleanup', 'worker-B', '1 minute') AS fence_b \gset
SELECT :fence_a AS fence_a, :fence_b AS fence_b,
       dlock.dlock_release('cron:cleanup', 'worker-A') AS a_released,
       dlock.dlock_holds('cron:cleanup', :fence_a) AS a_fence_valid,
       dlock.dlock_holds('cron:cleanup', :fence_b) AS b_fence_valid;
\echo
\echo '-- 4. Leases belong to a role: mallory knows alice''s owner string, and is refused (42501).'
CREATE ROLE alice LOGIN;
CREATE ROLE mallory LOGIN;
SQL
ask alice <<<"SELECT '   alice acquires payroll: fence ' || dlock.dlock_acquire('payroll', 'alice:host1', '1 minute')"
psql -X -q -P footer=off -P null=NULL -U mallory -d app 2>&1 <<'SQL'
\set SHOW_CONTEXT never
SELECT key, owner, holder_role FROM dlock.dlock_locks WHERE key = 'payroll';
SELECT dlock.dlock_release('payroll', 'alice:host1');
\echo '   SQLSTATE' :LAST_ERROR_SQLSTATE
SQL

echo
echo "-- 5. A client waiting on a pooled connection does not sit in a statement: it watches the key"
echo "--    (LISTEN) and is told when a release frees it."
sql app_owner <<SQL
SELECT dlock.dlock_watch('payroll') AS channel;
\\! psql -X -q -P footer=off -U alice -d app -c "SELECT dlock.dlock_release('payroll', 'alice:host1') AS alice_released"
SELECT 'after the release' AS watcher;
SQL

psql -X -q -P footer=off -U app_owner -d app 2>&1 <<'SQL'
\echo
\echo '-- 6. No background worker: expired leases are cleared on access, or by a sweep that a pg_cron'
\echo '--    job (or the client) runs.'
SELECT dlock.dlock_acquire('tmp:' || n, 'sweeper-demo', '100 milliseconds') IS NOT NULL AS taken
  FROM generate_series(1, 3) AS n \g /dev/null
SELECT pg_sleep(0.2) \g /dev/null
SELECT dlock.dlock_sweep() AS rows_swept;
\echo
\echo '-- 7. Fast mode needs the native extension''s shared memory; here it says so.'
\set SHOW_CONTEXT never
SELECT dlock.dlock_fast_acquire('cache:rebuild', 'host7', '5 seconds');
\echo '   SQLSTATE' :LAST_ERROR_SQLSTATE
SQL
echo
echo "== done: the demo cluster in $dir is stopped on exit. The same contract as the native extension:"
echo "   docs/src/operating/managed.md says how to install it on RDS, Aurora, Supabase, Cloud SQL, Azure, Neon."
