#!/usr/bin/env bash
# `make bench`: dlock against its peers in one run (bench/suite: workloads, ratios, plots).
# Starts its own servers on loopback — a tuned throwaway PostgreSQL with dlock preloaded and
# durable defaults (fsync, synchronous_commit on), redis-server without persistence, and a
# one-member etcd with its default durability (WAL fsync) — runs every contender on every
# workload, and writes results.json, results.md and PNG plots to bench/results/<timestamp>/.
# Everything is stopped at the end.
#
#   BENCH_ARGS="--seconds 2 --clients 1,8 --live 0,100000" bash bench/suite.sh   (see --help)
source "$(dirname "$0")/lib.sh"

cluster="$BUILD/bench-suite-cluster"
redis_dir="$BUILD/bench-suite-redis"
etcd_dir="$BUILD/bench-suite-etcd"
out="$root/bench/results/$stamp"
read -r -a extra_args <<<"${BENCH_ARGS:-}"

echo "bench: building bench-suite (release)"
"${CARGO:-cargo}" build --release -q -p bench-suite
bin="${CARGO_TARGET_DIR:-$root/target}/release/bench-suite"


# Stops the server whose pid file is $1, waiting up to $2 tenths of a second for it to exit.
stop_pidfile() {
  if [ -f "$1" ]; then
    local pid
    pid=$(cat "$1")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq "$2"); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    rm -f "$1"
  fi
}
stop_redis() { stop_pidfile "$redis_dir/redis.pid" 50; }
stop_etcd() { stop_pidfile "$etcd_dir/etcd.pid" 100; }
stop_all() {
  bash "$cluster_sh" stop "$cluster" fast
  stop_redis
  stop_etcd
}

mkdir -p "$BUILD"
bash "$cluster_sh" destroy "$cluster"
trap stop_all EXIT
# Tuned as a production lock server would be; durable: every acknowledged grant survives a crash.
port=$(env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE bash "$cluster_sh" start "$cluster" \
  "shared_preload_libraries = 'dlock'" \
  "dlock.fast_max_ttl = 30" \
  "dlock.fast_max_leases_per_role = 16384" "dlock.fast_max_leases_per_database = 16384" \
  "fsync = on" \
  "synchronous_commit = on" \
  "full_page_writes = on" \
  "max_connections = 300" \
  "shared_buffers = 512MB" \
  "wal_buffers = 64MB" \
  "max_wal_size = 8GB" \
  "checkpoint_timeout = 30min" \
  "autovacuum_vacuum_cost_limit = 2000" | sed -n 's/.* PGPORT=\([0-9]*\) .*/\1/p')
psql_() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres "$@"; }
psql_ -c "CREATE EXTENSION dlock"
psql_ -f "$root/bench/peers/naive_table_lock.sql"

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

# etcd: one member on loopback, default durability (the WAL fsynced before every answer).
etcd_args=()
etcd_line="etcd: not installed, left out"
stop_etcd
rm -rf "$etcd_dir"
if command -v etcd >/dev/null; then
  mkdir -p "$etcd_dir"
  etcd_port=$(free_port)
  etcd_peer=$(free_port)
  etcd --name bench --data-dir "$etcd_dir/data" --logger zap --log-outputs "$etcd_dir/etcd.log" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "bench=http://127.0.0.1:$etcd_peer" --initial-cluster-state new </dev/null >/dev/null 2>&1 &
  echo $! >"$etcd_dir/etcd.pid"
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$etcd_port/health" 2>/dev/null | grep -q '"health":"true"' && break
    sleep 0.1
  done
  curl -fs "http://127.0.0.1:$etcd_port/health" | grep -q '"health":"true"' || {
    echo "bench: etcd did not start (see $etcd_dir/etcd.log)" >&2
    exit 1
  }
  etcd_args=(--etcd-port "$etcd_port")
  etcd_line="etcd: $(etcd --version | sed -n 's/^etcd Version: //p'), one member, default durability (WAL fsync on), gRPC clients (tonic)"
fi

env_lines=(
  "machine: $(nproc) vCPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r)"
  "PostgreSQL: $(psql_ -Atc 'SHOW server_version'), dlock preloaded, fsync on, synchronous_commit on, shared_buffers 512MB, dlock.fast_max_ttl 30 s"
  "Redis: $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'), no persistence (appendonly no, save '')"
  "$etcd_line"
  "clients: tokio-postgres / redis-rs / tonic over TCP on 127.0.0.1, one process; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
)
env_args=()
for line in "${env_lines[@]}"; do env_args+=(--environment "$line"); done
mkdir -p "$out"
status=0
"$bin" --pg "host=127.0.0.1 port=$port user=postgres dbname=postgres" \
  --redis-port "$redis_port" "${etcd_args[@]}" --out "$out" "${env_args[@]}" "${extra_args[@]}" || status=$?
stop_all
# This release's targets, on a cluster of their own (a thousand connections), after the suite.
bash "$root/bench/targets.sh" "$out" || status=$?
echo
echo "bench: written to $out (results.md, results.json, *.png, targets.md)"
exit "$status"
