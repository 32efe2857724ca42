#!/usr/bin/env bash
# `make demo`: dlock's story in about fifteen seconds, told through psql against a throwaway
# cluster in $BUILD/demo — a race, a server-side wait, a renew, an expiry takeover with fencing,
# the lease table, a release refused to the wrong role, and fast mode. Expects `make install`
# first.
source "$(dirname "${BASH_SOURCE[0]}")/../tests/scripts/common.sh"

root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$root/build}
cluster="$BUILD/demo"
cluster_sh="$root/tests/scripts/cluster.sh"

stop_cluster() { bash "$cluster_sh" stop "$cluster" fast; }

bash "$cluster_sh" destroy "$cluster"
trap stop_cluster EXIT
# The server must not inherit RUST_BACKTRACE: pgrx would append a Rust backtrace to the
# DETAIL of errors that cross its FFI guard (a cancelled wait's 57014, for one).
# Preloaded, as production should run it: a release hands the key straight to its waiter.
# dlock.fast_max_ttl is short here so that fast mode's lock-delay after start is over by step 7.
cluster_env=$(env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE bash "$cluster_sh" start "$cluster" \
  "shared_preload_libraries = 'dlock'" "dlock.fast_max_ttl = 5")
eval "$cluster_env"

# One psql session reading SQL from stdin; errors stop it unless the caller says otherwise.
sql() { psql -X -q -v ON_ERROR_STOP=1 -P footer=off -P null=NULL "$@"; }
# One short query from stdin, bare output, for the racing and waiting sessions.
ask() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }

sql <<'SQL'
-- Installed into a schema of its own, which nobody else can write, and called qualified: no
-- object a role creates in public can capture a call (docs/src/operating/security.md).
CREATE SCHEMA dlock;
CREATE EXTENSION dlock SCHEMA dlock;
\echo
\echo '== dlock demo: distributed locks (leases) inside PostgreSQL'
\echo
\echo '-- 1. Two workers race for the nightly report. Exactly one wins and gets a fencing token;'
\echo '--    the other gets NULL at once (wait defaults to 0).'
SQL

for worker in worker-A worker-B; do
  ask -v worker="$worker" <<<"SELECT format('   %s: dlock.dlock_acquire(''report:nightly'', ...) -> %s', :'worker',
            coalesce('fence ' || dlock.dlock_acquire('report:nightly', :'worker', '1 minute'),
                     'NULL (someone else holds it)'))" &
done
wait

winner=$(ask <<<"SELECT owner FROM dlock.dlock_locks WHERE key = 'report:nightly'")
loser="worker-B"
if [ "$winner" = "worker-B" ]; then loser="worker-A"; fi

sql -v winner="$winner" -v loser="$loser" <<'SQL'
\echo
\echo '-- 2. The loser now waits on the server (wait => 10s) instead of polling.'
\echo '--    The winner finishes its work after 2 seconds and releases; the waiter is granted at once.'
SQL

ask -v loser="$loser" <<<"SELECT format('   %s waited %s s and got fence %s', :'loser',
          to_char(extract(epoch FROM clock_timestamp() - statement_timestamp()), 'FM990.00'), f)
   FROM (SELECT dlock.dlock_acquire('report:nightly', :'loser', '30 seconds', wait => '10 seconds') AS f) AS g" &
waiter=$!

sql -v winner="$winner" <<'SQL'
SELECT pg_sleep(1) \g /dev/null
\echo '   while it waits, dlock.dlock_locks shows one waiter on the key:'
SELECT key, owner, fence, waiters FROM dlock.dlock_locks WHERE key = 'report:nightly';
SELECT pg_sleep(1) \g /dev/null
\echo '   ' :winner 'releases:'
SELECT dlock.dlock_release('report:nightly', :'winner') AS released;
SQL
wait "$waiter"

sql -v loser="$loser" <<'SQL'
\echo
\echo '-- 3. A long job renews its lease before the ttl runs out (renew returns the new expires_at).'
SELECT round(extract(epoch FROM expires_at - now())) AS before
  FROM dlock.dlock_locks WHERE key = 'report:nightly' \gset
SELECT :before AS "expires in (s) before",
       round(extract(epoch FROM dlock.dlock_renew('report:nightly', :'loser', '5 minutes') - now()))
         AS "after dlock.dlock_renew(..., '5 minutes')";
SELECT dlock.dlock_release('report:nightly', :'loser') AS released;

\echo
\echo '-- 4. Expiry takeover. worker-A takes a 1-second lease, then stalls (a GC pause, a lost network).'
SELECT dlock.dlock_acquire('cron:cleanup', 'worker-A', '1 second') AS fence_a \gset
\echo '   worker-A holds cron:cleanup with fence' :fence_a
\echo '   ... 1.5 seconds pass ...'
SELECT pg_sleep(1.5) \g /dev/null
\echo '   the lease has expired: worker-B takes the key and gets a larger fence'
SELECT dlock.dlock_acquire('cron:cleanup', 'worker-B', '1 minute') AS fence_b \gset
SELECT :fence_b AS fence_b, :fence_b > :fence_a AS "fence_b > fence_a";
\echo '   worker-A wakes up: its release answers false, and a fenced write with its old token does nothing'
SELECT dlock.dlock_release('cron:cleanup', 'worker-A') AS a_released,
       dlock.dlock_holds('cron:cleanup', :fence_a) AS a_fence_valid,
       dlock.dlock_holds('cron:cleanup', :fence_b) AS b_fence_valid;

\echo
\echo '-- 5. Every live lease, as the view dlock.dlock_locks shows it. invoice:42 is session-bound'
\echo '--    (ttl NULL): it never expires and ends with this psql session.'
SELECT dlock.dlock_acquire('invoice:42', 'billing:host7:2f9c', NULL) IS NOT NULL AS session_bound_lease;
SELECT * FROM dlock.dlock_locks ORDER BY key;
SQL

sql <<'SQL'
\echo
\echo '-- 6. Leases belong to a role. alice takes a lease; mallory learns alice''s owner string'
\echo '--    and tries to release it: refused with 42501, even with the right owner.'
CREATE ROLE alice LOGIN;
CREATE ROLE mallory LOGIN;
GRANT USAGE ON SCHEMA dlock TO alice, mallory;
SQL
ask -U alice <<<"SELECT '   alice acquires payroll: fence ' || dlock.dlock_acquire('payroll', 'alice:host1:7f3a', '1 minute')"
psql -X -q -P footer=off -P null=NULL -U mallory 2>&1 <<'SQL' || true
\set SHOW_CONTEXT never
\echo '   mallory sees the lease but not its owner:'
SELECT key, owner, holder_role FROM dlock.dlock_locks WHERE key = 'payroll';
SELECT dlock.dlock_release('payroll', 'alice:host1:7f3a');
\echo '   SQLSTATE' :LAST_ERROR_SQLSTATE
SQL
ask -U alice <<<"SELECT '   alice releases her own lease: ' || dlock.dlock_release('payroll', 'alice:host1:7f3a')"

sql <<'SQL'
\echo
\echo '-- 7. Fast mode: the same leases kept in shared memory, no WAL, for Redis-like speed.'
\echo '--    After every server start no fast key is granted for dlock.fast_max_ttl (5 s here), so'
\echo '--    leases from before a crash have run out first: this acquire waits out what is left.'
SELECT dlock.dlock_fast_acquire('cache:rebuild', 'host7:4242:9f1c', '5 seconds', wait => '10 seconds') AS fast_fence;
SELECT dlock.dlock_fast_acquire('cache:rebuild', 'host8:77:01ab', '5 seconds') AS other_owner;
SELECT key, owner, fence, hold_count FROM dlock.dlock_fast_locks();
SELECT dlock.dlock_fast_release('cache:rebuild', 'host7:4242:9f1c') AS released;
SQL

echo
echo "== done: the demo cluster in $cluster is stopped on exit."
