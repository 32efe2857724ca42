#!/usr/bin/env bash
# `make bench-profile`: where the time of an acquire+release pair goes, per contender, on one
# throwaway cluster with durable defaults. For each contender, one pgbench run at 8 clients
# (BENCH_CLIENTS) measures pairs/s, WAL records, bytes and flushes per pair (pg_stat_wal) and
# the server time per statement (pg_stat_statements); during the dlock run, `perf` (if
# installed) samples every CPU, and the report splits the server's CPU time into protocol,
# executor (our SQL), commit/WAL flush, lock manager and dlock's own code.
# Writes $BUILD/bench/profile-<timestamp>.md.
source "$(dirname "$0")/lib.sh"

seconds=${BENCH_SECONDS:-10}
clients=${BENCH_CLIENTS:-8}
read -r -a contenders <<<"${BENCH_CONTENDERS:-ceiling naive dlock fast advisory}"
cluster="$BUILD/bench-profile-cluster"
mkdir -p "$BUILD/bench"
report="$BUILD/bench/profile-$stamp.md"
perf_data="$BUILD/bench/profile-$stamp.perf"
fast_delay=5

bash "$cluster_sh" destroy "$cluster"
trap 'bash "$cluster_sh" stop "$cluster" fast' EXIT
eval "$(env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE bash "$cluster_sh" start "$cluster" \
  "shared_preload_libraries = 'dlock,pg_stat_statements'" \
  "dlock.fast_max_ttl = 30" \
  "fsync = on" "synchronous_commit = on" "full_page_writes = on" \
  "shared_buffers = 256MB" "max_connections = 200" "max_wal_size = 4GB" \
  "checkpoint_timeout = 30min" "wal_buffers = 16MB" \
  "pg_stat_statements.track = all")"
started=$(date +%s)
psql -X -q -v ON_ERROR_STOP=1 <<'SQL'
CREATE EXTENSION dlock;
CREATE EXTENSION pg_stat_statements;
CREATE TABLE ceiling (id int PRIMARY KEY, v bigint NOT NULL);
INSERT INTO ceiling SELECT g, 0 FROM generate_series(1, 1000) g;
SQL
psql -X -q -v ON_ERROR_STOP=1 -f "$root/bench/peers/naive_table_lock.sql"

perf_ok=false
command -v perf >/dev/null && perf_ok=true

declare -A line
for contender in "${contenders[@]}"; do
  if [ "$contender" = fast ]; then
    # The lock-delay after start: dlock.fast_max_ttl (30 s here).
    while [ "$(($(date +%s) - started))" -lt 31 ]; do sleep 1; done
  fi
  psql -X -q -c CHECKPOINT -c "SELECT pg_stat_reset_shared('wal')" -c "SELECT pg_stat_statements_reset()" >/dev/null
  log="$BUILD/bench/profile-$stamp-$contender.log"
  "$pg_bin/pgbench" -n -M prepared -c "$clients" -j 2 -T "$seconds" -f "$root/bench/pgbench/$contender.sql" >"$log" 2>&1 &
  bench_pid=$!
  if $perf_ok && [ "$contender" = dlock ]; then
    sleep 2
    perf record -a -g -F 499 -o "$perf_data" -- sleep "$((seconds - 4))" >/dev/null 2>&1 || perf_ok=false
  fi
  wait "$bench_pid"
  tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' "$log")
  txns=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$log")
  wal=$(psql -X -At -F ' ' -c "SELECT wal_records, wal_bytes, wal_fpi, wal_sync FROM pg_stat_wal")
  stmts=$(psql -X -At -F '|' -c "SELECT calls, round((total_exec_time / calls * 1000)::numeric, 1), \
      left(regexp_replace(query, '\s+', ' ', 'g'), 60) FROM pg_stat_statements \
      WHERE query ~* '(dlock_|naive_|pg_advisory|UPDATE ceiling)' AND calls > 100 ORDER BY calls DESC LIMIT 2" \
    | awk -F'|' '{ printf "%s%s µs `%s`", (NR > 1 ? "; " : ""), $2, $3 }')
  read -r records bytes fpi syncs <<<"$wal"
  line[$contender]=$(awk -v c="$contender" -v t="$tps" -v n="$txns" -v r="$records" -v b="$bytes" \
      -v f="$fpi" -v s="$syncs" -v q="$stmts" \
    'BEGIN { printf "| %s | %.0f | %.1f | %.0f | %.2f | %.2f | %s |", c, t, r / n, b / n, f / n, s / n, q }')
  echo "bench-profile: $contender ${tps%.*} pairs/s"
done

breakdown=""
if $perf_ok; then
  # Share of all sampled CPU (both cores) spent inside each part, callers included.
  share() {
    perf report -i "$perf_data" --children --comm postgres --sort sym -q -g none 2>/dev/null |
      awk -v s="$1" '$NF == s { print $1; exit }'
  }
  total_pg=$(perf report -i "$perf_data" --no-children --sort comm -q -g none 2>/dev/null | awk '$2 == "postgres" { print $1 }')
  total_bench=$(perf report -i "$perf_data" --no-children --sort comm -q -g none 2>/dev/null | awk '$2 == "pgbench" { print $1 }')
  breakdown=$(
    echo "| part (callers included) | share of all CPU samples |"
    echo "|---|---:|"
    echo "| every postgres process | ${total_pg:-n/a} |"
    echo "| pgbench (the clients) | ${total_bench:-n/a} |"
    for sym in PostgresMain PortalRun pq_getbyte \
        fmgr_security_definer SPI_execute_snapshot GetCachedPlan standard_ExecutorStart \
        standard_ExecutorRun CommitTransactionCommand XLogFlush fdatasync LockAcquireExtended \
        nextval_internal; do
      echo "| \`$sym\` | $(share "$sym") |"
    done
  )
fi

{
  echo "# bench-profile $stamp"
  echo
  echo "$clients clients, $seconds s per contender, pgbench -M prepared, $(nproc) CPUs,"
  echo "$("$pg_bin/postgres" --version); fsync on, synchronous_commit on."
  echo "Per pair (a pair is the contender's acquire and release; one UPDATE for the ceiling):"
  echo
  echo "| contender | pairs/s | WAL records | WAL bytes | full-page images | WAL flushes | server time per statement |"
  echo "|---|---:|---:|---:|---:|---:|---|"
  for contender in "${contenders[@]}"; do echo "${line[$contender]}"; done
  echo
  if [ -n "$breakdown" ]; then
    echo "Where the CPU goes during the dlock run (perf, every CPU sampled):"
    echo
    echo "$breakdown"
  else
    echo "(perf not installed: no CPU breakdown)"
  fi
} | tee "$report"
echo "bench-profile: written to $report"
