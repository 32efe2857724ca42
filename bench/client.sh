#!/usr/bin/env bash
# `make bench-client`: what the dlock client (crate `dlock`, lib `dlock_client`) adds to an
# acquire+release pair, against the same two statements sent through raw tokio-postgres, in one
# run on one throwaway cluster with durable defaults (fsync, synchronous_commit on):
#   - the client: try_acquire (30 s ttl) then Guard::release, watchdog off and on (the default);
#   - raw tokio-postgres: `SELECT dlock_acquire($1,$2,'30 seconds'::interval)` and
#     `SELECT dlock_release($1,$2)` through a deadpool pool of 16 (pool against pool: the
#     target, client overhead <= 10 %) and on one connection per task (the floor);
#   - the raw pool sending the client's own statements and owner (to split the client's overhead
#     into its SQL and its Rust code);
# a fresh key per pair, at 1 and 8 concurrent tasks, in interleaved rounds, medians reported.
# The cluster is stopped at the end. Results (results.md, results.json) go to
# $BUILD/bench/client-<timestamp>/.
#
#   BENCH_CLIENT_ARGS="--rounds 12 --seconds 2" bash bench/client.sh   (see bench-client --help)
source "$(dirname "$0")/lib.sh"

cluster="$BUILD/bench-client-cluster"
out="$BUILD/bench/client-$stamp"
read -r -a extra_args <<<"${BENCH_CLIENT_ARGS:-}"

# Build first, so that the cluster does not idle through a compile.
echo "bench-client: building bench-client (release)"
"${CARGO:-cargo}" build --release -q -p bench-client

stop_cluster() {
  bash "$cluster_sh" stop "$cluster" fast
}

bash "$cluster_sh" destroy "$cluster"
trap stop_cluster EXIT
# The server must not inherit RUST_BACKTRACE (pgrx would put backtraces into error DETAILs).
port=$(env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE bash "$cluster_sh" start "$cluster" \
  "fsync = on" \
  "synchronous_commit = on" \
  "full_page_writes = on" \
  "max_connections = 100" \
  "shared_buffers = 256MB" \
  "max_wal_size = 4GB" \
  "checkpoint_timeout = 30min" | sed -n 's/.* PGPORT=\([0-9]*\) .*/\1/p')
psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "CREATE EXTENSION dlock"

echo "bench-client: cluster :$port"
mkdir -p "$out"
"${CARGO:-cargo}" run --release -q -p bench-client -- \
  --port "$port" --out "$out" --stamp "$stamp" "${extra_args[@]}"
echo
echo "bench-client: written to $out/results.md and $out/results.json"
