#!/usr/bin/env bash
# `make bench-sql`: acquire+release pairs per second from SQL, dlock against its two peers,
# measured side by side in one run on one throwaway cluster with durable defaults
# (fsync on, synchronous_commit on):
#   advisory  pg_advisory_lock/pg_advisory_unlock — PostgreSQL's own, no lease, no WAL
#   naive     the hand-written lock table of bench/peers/naive_table_lock.sql
#   dlock     dlock_acquire/dlock_release
# Each pair is two autocommit statements on a key of its own (pgbench -M prepared), at 1 and 8
# clients. Every contender runs BENCH_ROUNDS short runs, interleaved with the others' so that
# drift in the machine's load hits all alike; the median run counts. Prints a table with ratios
# and writes it to $BUILD/bench/sql-<timestamp>.md.
#
#   BENCH_SECONDS=12 BENCH_ROUNDS=3 BENCH_CLIENTS="1 8" BENCH_CONTENDERS="advisory naive dlock" \
#     bash bench/sql.sh
source "$(dirname "$0")/lib.sh"

seconds=${BENCH_SECONDS:-12}   # per contender and client count, split over the rounds
rounds=${BENCH_ROUNDS:-3}
round_seconds=$(((seconds + rounds - 1) / rounds))
warmup=${BENCH_WARMUP_SECONDS:-3}
read -r -a client_counts <<<"${BENCH_CLIENTS:-1 8}"
read -r -a contenders <<<"${BENCH_CONTENDERS:-advisory naive dlock}"
cluster="$BUILD/bench-cluster"
results_dir="$BUILD/bench"
report="$results_dir/sql-$stamp.md"
cpus=$(nproc)

stop_cluster() { bash "$cluster_sh" stop "$cluster" fast; }


bash "$cluster_sh" destroy "$cluster"
trap stop_cluster EXIT
# The server must not inherit RUST_BACKTRACE: pgrx would append a Rust backtrace to the
# DETAIL of errors that cross its FFI guard (a cancelled wait's 57014, for one).
eval "$(env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE bash "$cluster_sh" start "$cluster" \
  "fsync = on" \
  "synchronous_commit = on" \
  "full_page_writes = on" \
  "shared_buffers = 256MB" \
  "max_connections = 200" \
  "max_wal_size = 4GB" \
  "checkpoint_timeout = 30min" \
  "wal_buffers = 16MB")"
mkdir -p "$results_dir"

psql -X -q -v ON_ERROR_STOP=1 -f "$root/bench/peers/naive_table_lock.sql"
if [[ " ${contenders[*]} " == *" dlock "* ]]; then
  psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION dlock"
fi

# pairs/s and mean latency (ms) of one pgbench run: "<tps> <latency>".
run() {
  local contender=$1 clients=$2 secs=$3 log
  log="$results_dir/pgbench-$stamp-$contender-c$clients.log" # the last run's output
  psql -X -q -c CHECKPOINT
  "$pg_bin/pgbench" -n -M prepared -c "$clients" -j "$((clients < cpus ? clients : cpus))" \
    -T "$secs" -f "$root/bench/pgbench/$contender.sql" >"$log" 2>&1 || {
    cat "$log" >&2
    return 1
  }
  if grep -q '^number of failed transactions: [1-9]' "$log"; then
    echo "bench: $contender had failed transactions, see $log" >&2
    return 1
  fi
  local tps lat
  tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' "$log")
  lat=$(sed -n 's/^latency average = \([0-9.]*\) ms$/\1/p' "$log")
  echo "$tps $lat"
}

echo "bench: warm-up (${warmup} s per contender)"
for contender in "${contenders[@]}"; do
  run "$contender" "${client_counts[-1]}" "$warmup" >/dev/null
done

# The median of "<tps> <latency>" lines, by tps.
median() { sort -g | awk '{ line[NR] = $0 } END { print line[int((NR + 1) / 2)] }'; }

declare -A tps lat runs
for clients in "${client_counts[@]}"; do
  for ((round = 1; round <= rounds; round++)); do
    for contender in "${contenders[@]}"; do
      echo "bench: $contender, $clients client(s), round $round/$rounds, ${round_seconds} s"
      runs[$contender/$clients]+="$(run "$contender" "$clients" "$round_seconds")"$'\n'
    done
  done
  for contender in "${contenders[@]}"; do
    result=$(printf '%s' "${runs[$contender/$clients]}" | median)
    tps[$contender/$clients]=${result% *}
    lat[$contender/$clients]=${result#* }
  done
done

# Leftover leases would mean a release went missing.
leftover_dlock=$(psql -X -At -c "SELECT count(*) FROM dlock_locks" 2>/dev/null || echo n/a)
leftover_naive=$(psql -X -At -c "SELECT count(*) FROM naive_lock")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }'; }

{
  echo "# bench-sql $stamp"
  echo
  echo "acquire+release pairs per second; each pair is two autocommit statements on a fresh key"
  echo "(pgbench -M prepared; median of $rounds interleaved runs of ${round_seconds} s; ${cpus} CPUs;"
  echo "$("$pg_bin/postgres" --version);"
  echo "fsync on, synchronous_commit on, shared_buffers 256MB)."
  echo
  echo "| contender | clients | pairs/s | mean latency (ms) | pairs/s of each run |"
  echo "|---|---:|---:|---:|---|"
  for clients in "${client_counts[@]}"; do
    for contender in "${contenders[@]}"; do
      printf '| %s | %s | %.0f | %.3f | %s |\n' "$contender" "$clients" \
        "${tps[$contender/$clients]}" "${lat[$contender/$clients]}" \
        "$(printf '%s' "${runs[$contender/$clients]}" | awk '{ printf "%s%.0f", (NR > 1 ? " " : ""), $1 }')"
    done
  done
  echo
  echo "| clients | dlock / naive | dlock / advisory |"
  echo "|---:|---:|---:|"
  for clients in "${client_counts[@]}"; do
    echo "| $clients | $(ratio "${tps[dlock/$clients]:-0}" "${tps[naive/$clients]:-0}") |" \
      "$(ratio "${tps[dlock/$clients]:-0}" "${tps[advisory/$clients]:-0}") |"
  done
  echo
  echo "Leftover rows after the run (must be 0): dlock_locks $leftover_dlock, naive_lock $leftover_naive."
  echo "advisory locks write no WAL and are not leases; naive and dlock acquire commit durably;"
  echo "dlock_release in autocommit commits asynchronously by design (a release needs no durability)."
} | tee "$report"
echo
echo "bench: written to $report"
