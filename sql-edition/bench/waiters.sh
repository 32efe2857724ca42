#!/usr/bin/env bash
# The SQL edition beside the native extension, one run, two clusters of our own: the edition's
# as on a managed service (no dlock library loaded: with it preloaded its dlock.* settings
# exist and every call would take the edition's general path), the native one with the library
# preloaded, as it is at its best. Each cluster has the hand-written lock table
# (bench/pgbench/targets/hand_table.sql) to compare with:
#   pairs/s   the uncontended durable pair (prepared) at 8 and 64 clients, in interleaved rounds
#             (medians), beside the hand-written table, and beside the PL/pgSQL floor: a
#             SECURITY DEFINER function per call doing one UPDATE in place of the same table
#             shape and nothing else (no role, queue, fence-history or expiry rules), what any
#             SQL-only design pays for the language and the closed table
#   hand-off  a hot key among 8 clients that hold it 20 ms: the time from one holder's release
#             to the next holder's grant, p50 and p99
#   parked    100 sessions waiting 30 s on a held key: their CPU over 10 s (from /proc), and
#             what pg_stat_activity says they wait on
# A benchmark, not a test: it asserts nothing. DURATION (s) per pgbench run (default 4), ROUNDS
# interleaved rounds (default 3).
source "$(dirname "${BASH_SOURCE[0]}")/../tests/lib.sh"
DURATION=${DURATION:-4}
ROUNDS=${ROUNDS:-3}
here=$(cd "$(dirname "$0")" && pwd)
bin=$("$PG_CONFIG" --bindir)

SQLED_DIR=$BUILD/sql-edition/bench
NATIVE_DIR=$BUILD/sql-edition/bench-native
bash "$CLUSTER_SH" destroy "$SQLED_DIR"
bash "$CLUSTER_SH" destroy "$NATIVE_DIR"
trap 'bash "$CLUSTER_SH" destroy "$SQLED_DIR"; bash "$CLUSTER_SH" destroy "$NATIVE_DIR"' EXIT
eval "$(bash "$CLUSTER_SH" start "$NATIVE_DIR" "max_connections = 300" "shared_preload_libraries = 'dlock'")"
NATIVE_HOST=$PGHOST NATIVE_PORT=$PGPORT
eval "$(bash "$CLUSTER_SH" start "$SQLED_DIR" "max_connections = 300")"
SQLED_HOST=$PGHOST SQLED_PORT=$PGPORT
# on DB ARGS...: a command's libpq environment for database DB's cluster (sqled or native).
on() {
  local db=$1
  shift
  if [ "$db" = native ]; then PGHOST=$NATIVE_HOST PGPORT=$NATIVE_PORT "$@"; else PGHOST=$SQLED_HOST PGPORT=$SQLED_PORT "$@"; fi
}
file=$(OUT=$BUILD/sql-edition bash "$SQLED/build.sh" | tail -n 1)
on sqled psql -X -q -v ON_ERROR_STOP=1 -U postgres -d postgres -c "CREATE ROLE app_owner LOGIN CREATEROLE" \
  -c "CREATE DATABASE sqled OWNER app_owner" >/dev/null
on sqled psql -X -q -v ON_ERROR_STOP=1 -U app_owner -d sqled -c "SET search_path = public" -f "$file" >/dev/null
on sqled psql -X -q -v ON_ERROR_STOP=1 -U postgres -d sqled -f "$here/floor.sql" >/dev/null
on native psql -X -q -v ON_ERROR_STOP=1 -U postgres -d postgres -c "CREATE DATABASE native" >/dev/null
on native psql -X -q -v ON_ERROR_STOP=1 -U postgres -d native -c "CREATE EXTENSION dlock" >/dev/null
for db in sqled native; do
  on "$db" psql -X -q -U postgres -d "$db" -c "CREATE TABLE hand_lock (key text PRIMARY KEY, owner text NOT NULL, expires_at timestamptz NOT NULL)" \
    -c "CREATE UNLOGGED TABLE sqled_handoff (fence bigint, granted_at float8, released_at float8)" >/dev/null
done

tps() { { on "$1" "$bin/pgbench" -n -M prepared -c "$2" -j "$2" -T "$DURATION" -U postgres "${@:4}" -f "$3" "$1" 2>/dev/null || true; } | sed -n 's/^tps = \([0-9.]*\).*/\1/p'; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "== uncontended durable pair, pairs/s (prepared, $ROUNDS interleaved rounds of ${DURATION} s, medians)"
for c in 8 64; do
  hand='' sql='' floor='' nhand='' native=''
  for r in $(seq 1 "$ROUNDS"); do
    hand+=" $(tps sqled $c "$ROOT/bench/pgbench/targets/hand_table.sql")"
    sql+=" $(tps sqled $c "$here/pair.sql")"
    floor+=" $(tps sqled $c "$here/floor_pair.sql")"
    nhand+=" $(tps native $c "$ROOT/bench/pgbench/targets/hand_table.sql")"
    native+=" $(tps native $c "$here/pair.sql")"
  done
  awk -v c=$c -v h="$(median <<<"$hand")" -v s="$(median <<<"$sql")" -v f="$(median <<<"$floor")" \
      -v nh="$(median <<<"$nhand")" -v n="$(median <<<"$native")" \
    'BEGIN { printf "%2d clients: hand table %6.0f  sql edition %6.0f (%.2fx)  PL/pgSQL floor %6.0f (%.2fx)  |  native cluster: hand table %6.0f  native %6.0f (%.2fx)\n", c, h, s, s / h, f, f / h, nh, n, n / nh }'
  echo "    rounds: hand$hand; sql$sql; floor$floor; native hand$nhand; native$native"
done

echo "== hot key hand-off among 8 clients holding it 20 ms"
for db in sqled native; do
  on "$db" psql -X -q -U postgres -d "$db" -c "TRUNCATE sqled_handoff" >/dev/null
  tps "$db" 8 "$here/handoff.sql" -D hold_ms=20 >/dev/null
  on "$db" psql -X -At -U postgres -d "$db" -c "
    WITH h AS (SELECT granted_at - lag(released_at) OVER (ORDER BY fence) AS gap FROM sqled_handoff)
    SELECT format('%s: %s hand-offs, p50 %s ms, p99 %s ms', '$db', count(gap),
                  round((percentile_cont(0.5) WITHIN GROUP (ORDER BY gap) * 1000)::numeric, 2),
                  round((percentile_cont(0.99) WITHIN GROUP (ORDER BY gap) * 1000)::numeric, 2))
      FROM h WHERE gap IS NOT NULL"
done

echo "== 100 parked waiters, 10 s"
ticks=$(getconf CLK_TCK)
for db in sqled native; do
  on "$db" psql -X -q -U postgres -d "$db" -c "SELECT dlock_acquire('parked', 'holder', '1 minute')" >/dev/null
  for i in $(seq 1 100); do
    on "$db" psql -X -q -U postgres -d "$db" -c "SET application_name = 'parked'" \
      -c "SELECT dlock_acquire('parked', 'w$i', '1 minute', '40 seconds')" >/dev/null 2>&1 &
  done
  sleep 4
  pids=$(on "$db" psql -X -At -U postgres -d "$db" -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'parked' AND datname = '$db'")
  cpu() { local t=0 p; for p in $pids; do [ -r /proc/$p/stat ] && t=$((t + $(awk '{ print $14 + $15 }' /proc/$p/stat))); done; echo $t; }
  t0=$(cpu); sleep 10; t1=$(cpu)
  events=$(on "$db" psql -X -At -U postgres -d "$db" -c "SELECT string_agg(e || ' ' || n, ', ') FROM (SELECT coalesce(wait_event_type || '/' || wait_event, 'on CPU') AS e, count(*) AS n FROM pg_stat_activity WHERE application_name = 'parked' GROUP BY 1 ORDER BY 2 DESC) x")
  waiters=$(on "$db" psql -X -At -U postgres -d "$db" -c "SELECT waiters FROM dlock_locks WHERE key = 'parked'")
  awk -v db=$db -v n="$(wc -w <<<"$pids")" -v d=$((t1 - t0)) -v hz=$ticks -v ev="$events" -v w="$waiters" \
    'BEGIN { printf "%s: %d waiting sessions (dlock_locks.waiters %s), CPU %.3f s in 10 s (%.2f%% of a core); wait events: %s\n", db, n, w, d / hz, d / hz / 10 * 100, ev }'
  on "$db" psql -X -q -U postgres -d "$db" -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'parked'" >/dev/null
  wait
done
