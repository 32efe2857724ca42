#!/usr/bin/env bash
# `make bench-wait`: dlock's server-side waiting, measured in one run against its peers:
#   1. hand-off latency with one waiter: the holder's release call returning → the parked
#      waiter's acquire call returning (p50/p99/max, HdrHistogram);
#   2. the same hop along a line of waiters on one key (each granted waiter releases at once);
#   3. the peers: pg_advisory_lock (the floor inside PostgreSQL) and a Redisson-style Redis lock
#      (SET NX PX, owner-checked Lua DEL + PUBLISH, pub/sub waiters), with ratios;
#   4. the CPU of all the cluster's processes while waiters are parked (on keys of their own,
#      and all on one key), against advisory-lock waiters and an idle baseline.
# dlock is measured on two throwaway clusters with durable defaults: one that loads it on demand
# (CREATE EXTENSION only, as the README installs it) and one with shared_preload_libraries =
# 'dlock', where a release hands the key to the head of the queue in its own transaction. Redis runs on a free
# loopback port without persistence. Everything is stopped at the end.
# Results (results.md, results.json) go to $BUILD/bench/wait-<timestamp>/.
#
#   BENCH_WAIT_ARGS="--handoffs 200 --cpu-seconds 10" bash bench/wait.sh   (see bench-wait --help)
source "$(dirname "$0")/lib.sh"

main_cluster="$BUILD/bench-wait-cluster"
preload_cluster="$BUILD/bench-wait-preload"
redis_dir="$BUILD/bench-wait-redis"
out="$BUILD/bench/wait-$stamp"
read -r -a extra_args <<<"${BENCH_WAIT_ARGS:-}"

# Build first, so that no cluster idles through a compile.
echo "bench-wait: building bench-wait (release)"
"${CARGO:-cargo}" build --release -q -p bench-wait

if ! command -v redis-server >/dev/null; then
  echo "bench-wait: installing redis-server"
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
fi

stop_redis() {
  local pid
  if [ -f "$redis_dir/redis.pid" ]; then
    pid=$(cat "$redis_dir/redis.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do # it shuts down on its own time: wait, up to 5 s
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    rm -f "$redis_dir/redis.pid"
  fi
}

stop_all() {
  bash "$cluster_sh" stop "$main_cluster" fast
  bash "$cluster_sh" stop "$preload_cluster" fast
  stop_redis
}

# Starts a cluster with durable defaults plus "$@"; prints its port.
start_cluster() {
  local dir=$1
  shift
  # The server must not inherit RUST_BACKTRACE (pgrx would put backtraces into error DETAILs).
  env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE bash "$cluster_sh" start "$dir" \
    "fsync = on" \
    "synchronous_commit = on" \
    "full_page_writes = on" \
    "max_connections = 300" \
    "shared_buffers = 256MB" \
    "max_wal_size = 4GB" \
    "checkpoint_timeout = 30min" \
    "$@" | sed -n 's/.* PGPORT=\([0-9]*\) .*/\1/p'
}


bash "$cluster_sh" destroy "$main_cluster"
bash "$cluster_sh" destroy "$preload_cluster"
trap stop_all EXIT
main_port=$(start_cluster "$main_cluster")
preload_port=$(start_cluster "$preload_cluster" "shared_preload_libraries = 'dlock'")
for port in "$main_port" "$preload_port"; do
  psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "CREATE EXTENSION dlock"
done

stop_redis
rm -rf "$redis_dir"
mkdir -p "$redis_dir"
redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
  --daemonize yes --pidfile "$redis_dir/redis.pid" --logfile "$redis_dir/redis.log" --dir "$redis_dir"
for _ in $(seq 50); do
  [ "$(redis-cli -p "$redis_port" ping 2>/dev/null)" = PONG ] && break
  sleep 0.1
done

echo "bench-wait: on demand :$main_port, preloaded :$preload_port, redis :$redis_port"
mkdir -p "$out"
"${CARGO:-cargo}" run --release -q -p bench-wait -- \
  --pg-port "$main_port" --preload-port "$preload_port" --redis-port "$redis_port" \
  --out "$out" --stamp "$stamp" "${extra_args[@]}"
echo
echo "bench-wait: written to $out/results.md and $out/results.json"
