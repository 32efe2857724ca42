#!/usr/bin/env bash
# The Rust client's conformance run (conformance/runners/rust, package dlock-conformance).
#
#   conformance-rust.sh test [--only a,b]   build the runner, then on a throwaway cluster (dlock
#                                           preloaded, installed in schema dlock) and a pgbouncer
#                                           in transaction mode in front of it, run every scenario
#                                           of conformance/scenarios in --strict mode
#
# The cluster and pgbouncer are started as tests/scripts/clients.sh starts them, under
# $BUILD/clients/rust-conformance/, and stopped at the end whatever happened.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

root=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$root/build}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
export PG_BIN=$("$PG_CONFIG" --bindir)
out="$BUILD/clients/rust-conformance"
cluster_sh="$root/tests/scripts/cluster.sh"
cluster="$out/cluster"
mode=${1:-test}
shift || true

say() { echo "conformance-rust: $*" >&2; }

# The runner's binary; its path on stdout.
build() {
  say "building dlock-conformance"
  (cd "$root" && cargo build -q -p dlock-conformance >&2)
  local target
  target=$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
  echo "$target/debug/dlock-conformance"
}

# A fresh cluster with dlock preloaded and installed in schema dlock; sets DSN.
start_cluster() {
  bash "$cluster_sh" destroy "$cluster" >/dev/null 2>&1 || true
  eval "$(env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE bash "$cluster_sh" start "$cluster" "shared_preload_libraries = 'dlock'")"
  "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres \
    -c "CREATE SCHEMA dlock" -c "CREATE EXTENSION dlock SCHEMA dlock" >&2
  DSN="postgresql://postgres@127.0.0.1:$PGPORT/postgres"
}

# A pgbouncer in transaction mode with 4 server connections in front of the cluster (as
# clients.sh starts it); sets PGBOUNCER_DSN.
start_pgbouncer() {
  local dir="$out/pgbouncer" port
  rm -rf "$dir"
  mkdir -p "$dir"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  echo '"postgres" ""' >"$dir/userlist.txt"
  {
    echo "[databases]"
    echo "postgres = host=127.0.0.1 port=$PGPORT dbname=postgres"
    echo "[pgbouncer]"
    echo "listen_addr = 127.0.0.1"
    echo "listen_port = $port"
    echo "unix_socket_dir ="
    echo "auth_type = trust"
    echo "auth_file = $dir/userlist.txt"
    echo "pool_mode = transaction"
    echo "default_pool_size = 4"
    echo "min_pool_size = 0"
    echo "reserve_pool_size = 0"
    echo "max_client_conn = 200"
    echo "ignore_startup_parameters = extra_float_digits"
    # pgbouncer refuses to run as root: started as root it switches to `postgres` itself.
    if [ "$(id -u)" = 0 ]; then echo "user = postgres"; fi
  } >"$dir/pgbouncer.ini"
  chown -R postgres: "$dir" 2>/dev/null || true
  "${PGBOUNCER:-/usr/sbin/pgbouncer}" "$dir/pgbouncer.ini" >"$dir/pgbouncer.log" 2>&1 &
  PGBOUNCER_PID=$!
  for _ in $(seq 1 100); do
    if python3 -c "import socket, sys; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null; then
      PGBOUNCER_DSN="postgresql://postgres@127.0.0.1:$port/postgres"
      return 0
    fi
    sleep 0.1
  done
  cat "$dir/pgbouncer.log" >&2
  return 1
}

stop_all() {
  if [ -n "${PGBOUNCER_PID:-}" ]; then kill "$PGBOUNCER_PID" 2>/dev/null || true; wait "$PGBOUNCER_PID" 2>/dev/null || true; fi
  bash "$cluster_sh" stop "$cluster" fast >/dev/null 2>&1 || true
}

run_tests() {
  local runner started status=0
  runner=$(build)
  mkdir -p "$out"
  trap stop_all EXIT
  start_cluster
  start_pgbouncer
  started=$SECONDS
  DLOCK_CONFORMANCE_DSN=$DSN DLOCK_CONFORMANCE_PGBOUNCER_DSN=$PGBOUNCER_DSN \
    DLOCK_CONFORMANCE_SUITE="$root/conformance" "$runner" --strict "$@" || status=$?
  if [ "$status" = 0 ]; then
    say "passed ($((SECONDS - started)) s)"
  else
    say "FAILED ($((SECONDS - started)) s)"
  fi
  return "$status"
}

case "$mode" in
test) run_tests "$@" ;;
*)
  echo "usage: conformance-rust.sh test [--only a,b]" >&2
  exit 2
  ;;
esac
