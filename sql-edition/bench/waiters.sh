#!/usr/bin/env bash
# The SQL edition beside the native extension, in one cluster of our own (two databases; the
# native library preloaded, as it is at its best), one run:
#   pairs/s   the uncontended durable pair (prepared) at 8 and 64 clients, beside the
#             hand-written lock table (bench/pgbench/targets/hand_table.sql)
#   hand-off  a hot key among 8 clients that hold it 20 ms: the time from one holder's release
#             to the next holder's grant, p50 and p99
#   parked    100 sessions waiting 30 s on a held key: their CPU over 10 s (from /proc), and
#             what pg_stat_activity says they wait on
# A benchmark, not a test: it asserts nothing. DURATION (s) per pgbench run, default 10.
source "$(dirname "${BASH_SOURCE[0]}")/../tests/lib.sh"
DURATION=${DURATION:-10}
here=$(cd "$(dirname "$0")" && pwd)
bin=$("$PG_CONFIG" --bindir)

SQLED_DIR=$BUILD/sql-edition/bench
bash "$CLUSTER_SH" destroy "$SQLED_DIR"
eval "$(bash "$CLUSTER_SH" start "$SQLED_DIR" "max_connections = 300" "shared_preload_libraries = 'dlock'")"
export PGHOST PGPORT
trap sqled_destroy EXIT
file=$(OUT=$BUILD/sql-edition bash "$SQLED/build.sh" | tail -n 1)
psql -X -q -v ON_ERROR_STOP=1 -U postgres -d postgres -c "CREATE ROLE app_owner LOGIN CREATEROLE" \
  -c "CREATE DATABASE sqled OWNER app_owner" -c "CREATE DATABASE native" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -U app_owner -d sqled -c "SET search_path = public" -f "$file" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -U postgres -d native -c "CREATE EXTENSION dlock" >/dev/null
for db in sqled native; do
  psql -X -q -U postgres -d "$db" -c "CREATE TABLE hand_lock (key text PRIMARY KEY, owner text NOT NULL, expires_at timestamptz NOT NULL)" \
    -c "CREATE UNLOGGED TABLE sqled_handoff (fence bigint, granted_at float8, released_at float8)" >/dev/null
done

tps() { { "$bin/pgbench" -n -M prepared -c "$2" -j "$2" -T "$DURATION" -U postgres "${@:4}" -f "$3" "$1" 2>/dev/null || true; } | sed -n 's/^tps = \([0-9.]*\).*/\1/p'; }

echo "== uncontended durable pair, pairs/s (prepared, ${DURATION} s each)"
for c in 8 64; do
  hand=$(tps sqled $c "$ROOT/bench/pgbench/targets/hand_table.sql")
  sql=$(tps sqled $c "$here/pair.sql")
  native=$(tps native $c "$here/pair.sql")
  awk -v c=$c -v h="$hand" -v s="$sql" -v n="$native" \
    'BEGIN { printf "%2d clients: hand table %8.0f  sql edition %8.0f (%.2fx)  native %8.0f (%.2fx)\n", c, h, s, s / h, n, n / h }'
done

echo "== hot key hand-off among 8 clients holding it 20 ms"
for db in sqled native; do
  psql -X -q -U postgres -d "$db" -c "TRUNCATE sqled_handoff" >/dev/null
  tps "$db" 8 "$here/handoff.sql" -D hold_ms=20 >/dev/null
  psql -X -At -U postgres -d "$db" -c "
    WITH h AS (SELECT granted_at - lag(released_at) OVER (ORDER BY fence) AS gap FROM sqled_handoff)
    SELECT format('%s: %s hand-offs, p50 %s ms, p99 %s ms', '$db', count(gap),
                  round((percentile_cont(0.5) WITHIN GROUP (ORDER BY gap) * 1000)::numeric, 2),
                  round((percentile_cont(0.99) WITHIN GROUP (ORDER BY gap) * 1000)::numeric, 2))
      FROM h WHERE gap IS NOT NULL"
done

echo "== 100 parked waiters, 10 s"
ticks=$(getconf CLK_TCK)
for db in sqled native; do
  psql -X -q -U postgres -d "$db" -c "SELECT dlock_acquire('parked', 'holder', '1 minute')" >/dev/null
  for i in $(seq 1 100); do
    psql -X -q -U postgres -d "$db" -c "SET application_name = 'parked'" \
      -c "SELECT dlock_acquire('parked', 'w$i', '1 minute', '40 seconds')" >/dev/null 2>&1 &
  done
  sleep 4
  pids=$(psql -X -At -U postgres -d "$db" -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'parked' AND datname = '$db'")
  cpu() { local t=0 p; for p in $pids; do [ -r /proc/$p/stat ] && t=$((t + $(awk '{ print $14 + $15 }' /proc/$p/stat))); done; echo $t; }
  t0=$(cpu); sleep 10; t1=$(cpu)
  events=$(psql -X -At -U postgres -d "$db" -c "SELECT string_agg(e || ' ' || n, ', ') FROM (SELECT coalesce(wait_event_type || '/' || wait_event, 'on CPU') AS e, count(*) AS n FROM pg_stat_activity WHERE application_name = 'parked' GROUP BY 1 ORDER BY 2 DESC) x")
  waiters=$(psql -X -At -U postgres -d "$db" -c "SELECT waiters FROM dlock_locks WHERE key = 'parked'")
  awk -v db=$db -v n="$(wc -w <<<"$pids")" -v d=$((t1 - t0)) -v hz=$ticks -v ev="$events" -v w="$waiters" \
    'BEGIN { printf "%s: %d waiting sessions (dlock_locks.waiters %s), CPU %.3f s in 10 s (%.2f%% of a core); wait events: %s\n", db, n, w, d / hz, d / hz / 10 * 100, ev }'
  psql -X -q -U postgres -d "$db" -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'parked'" >/dev/null
  wait
done
