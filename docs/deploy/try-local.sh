#!/usr/bin/env bash
# Runs deploy/patroni.yml for real, on loopback: one etcd, two Patroni nodes (node1.env,
# node2.env ports), then a failover by crashing the leader, and checks what dlock promises.
#
#   sudo deploy/try-local.sh          # needs: patroni, etcd-server, python3-etcd, dlock installed
#
# Steps: start etcd and node1 (bootstraps, runs post_bootstrap = CREATE EXTENSION dlock), then
# node2 (clones, becomes the synchronous standby); take TTL leases and churn fences on the
# leader; kill -9 node1's Patroni and stop its PostgreSQL immediately; wait for Patroni to
# promote node2; check every lease (owner, fence, renew by its owner) and that new fences are
# above every fence handed out before; restart node1 and wait for it to rejoin as the
# synchronous standby (pg_rewind). Everything lives in a temporary directory, removed at exit
# (KEEP=1 keeps it). The DCS timings are shortened (ttl 20, loop_wait 2, retry_timeout 5) so that
# the failover takes seconds rather than a minute.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=/usr/lib/postgresql/15/bin
work=$(mktemp -d /tmp/dlock-patroni.XXXXXX)
chown postgres: "$work"
pids=()
declare -A node_pid

as_pg() { runuser -u postgres -- "$@"; }
# Runs as postgres in this very process (exec), so that $! is the server's own pid.
# (No RUST_BACKTRACE: it would put pgrx backtraces into every error's DETAIL.)
exec_pg() {
  exec setpriv --reuid=postgres --regid=postgres --init-groups \
    env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE HOME=/var/lib/postgresql "$@"
}
log() { printf '%s try-local: %s\n' "$(date +%T)" "$*" >&2; }

cleanup() {
  set +e
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  for node in node1 node2; do
    [ -f "$work/$node/postmaster.pid" ] && as_pg "$bin/pg_ctl" -D "$work/$node" -m immediate stop >/dev/null 2>&1
  done
  if [ "${KEEP:-0}" = 1 ]; then log "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# Waits up to $1 seconds for the command after it to succeed.
wait_for() {
  local limit=$1 what=$2; shift 2
  for _ in $(seq 1 $((limit * 5))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  log "FAILED: $what not within ${limit}s"; exit 1
}

export PATRONI_SUPERUSER_PASSWORD=super-secret PATRONI_REPLICATION_PASSWORD=repl-secret \
  PATRONI_REWIND_PASSWORD=rewind-secret
install -o postgres -m 0755 "$here/dlock-post-bootstrap.sh" "$work/dlock-post-bootstrap.sh"
sed -e "s|/etc/patroni/dlock-post-bootstrap.sh|$work/dlock-post-bootstrap.sh|" \
    -e "s|/tmp/pgpass-dlock|$work/pgpass|" \
    -e "s|unix_socket_directories: .*|unix_socket_directories: $work|" \
    -e "s|ttl: 30|ttl: 20|" -e "s|loop_wait: 10|loop_wait: 2|" -e "s|retry_timeout: 10|retry_timeout: 5|" \
    "$here/patroni.yml" >"$work/patroni.yml"
chown postgres: "$work/patroni.yml"

log "etcd"
(exec_pg etcd --name dlock-etcd --data-dir "$work/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster dlock-etcd=http://127.0.0.1:2380) >"$work/etcd.log" 2>&1 &
pids+=($!)
wait_for 30 "etcd healthy" curl -sf http://127.0.0.1:2379/health

start_node() { # node: runs Patroni with the node's env file, data dir in $work
  local node=$1
  (
    set -a
    # shellcheck source=/dev/null
    . "$here/$node.env"
    set +a
    export PATRONI_POSTGRESQL_DATA_DIR="$work/$node" PATRONI_POSTGRESQL_PGPASS="$work/pgpass-$node"
    exec_pg patroni "$work/patroni.yml"
  ) >>"$work/$node.log" 2>&1 &
  pids+=($!)
  node_pid[$node]=$!
}
rest() { grep -o 'RESTAPI_LISTEN=.*' "$here/$1.env" | cut -d= -f2; }
port() { grep -o 'POSTGRESQL_LISTEN=.*' "$here/$1.env" | cut -d: -f2; }
sql() { # node sql: one value, as postgres over TCP
  PGPASSWORD=$PATRONI_SUPERUSER_PASSWORD psql -h 127.0.0.1 -p "$(port "$1")" -U postgres -d postgres \
    -XAtq -v ON_ERROR_STOP=1 -c "$2"
}

log "node1 bootstraps"
start_node node1
wait_for 90 "node1 leader" curl -sf "http://$(rest node1)/primary"
wait_for 30 "dlock created by post_bootstrap" sql node1 "SELECT 1 FROM pg_extension WHERE extname = 'dlock'"
log "node2 clones and becomes the synchronous standby"
start_node node2
wait_for 90 "node2 synchronous standby" curl -sf "http://$(rest node2)/sync"
[ "$(sql node1 "SELECT sync_state FROM pg_stat_replication")" = sync ]
[ "$(sql node1 "SHOW shared_preload_libraries")" = dlock ]
PGPASSWORD=$PATRONI_SUPERUSER_PASSWORD psql -h 127.0.0.1 -p "$(port node2)" -U postgres -d template1 -XAtq \
  -c "SELECT 1 FROM pg_extension WHERE extname = 'dlock'" | grep -qx 1 ||
  { log "FAILED: dlock missing in template1 on node2"; exit 1; }

log "leases and fences on node1"
sql node1 "SELECT max(f) FROM (SELECT dlock_acquire('churn', 'churn:' || i, '1 hour') AS f,
             dlock_release('churn', 'churn:' || i) FROM generate_series(1, 100) AS i) AS x" >/dev/null
for i in $(seq 1 20); do
  sql node1 "SELECT dlock_acquire('held:$i', 'holder:$i', '1 hour')" >>"$work/fences"
done
highest=$(sql node1 "SELECT last_value FROM dlock_internal.fence_seq")  # >= every fence handed out
leases_before=$(sql node1 "SELECT string_agg(key || '=' || owner || '/' || fence, ' ' ORDER BY key) FROM dlock_locks")

log "crash node1 (kill -9 Patroni, immediate stop of PostgreSQL)"
kill -9 "${node_pid[node1]}"
as_pg "$bin/pg_ctl" -D "$work/node1" -m immediate stop >/dev/null
wait_for 90 "node2 promoted by Patroni" curl -sf "http://$(rest node2)/primary"
# Patroni's /primary can answer 200 a moment before PostgreSQL has left recovery (seen once:
# a dlock_renew then failed with 25006, read-only transaction); wait for writes.
wait_for 30 "node2 accepts writes" test "$(sql node2 "SELECT NOT pg_is_in_recovery()")" = t
log "node2 is the leader"

leases_after=$(sql node2 "SELECT string_agg(key || '=' || owner || '/' || fence, ' ' ORDER BY key) FROM dlock_locks")
[ "$leases_before" = "$leases_after" ] || { log "FAILED: leases before: $leases_before / after: $leases_after"; exit 1; }
for i in $(seq 1 20); do
  [ -n "$(sql node2 "SELECT dlock_renew('held:$i', 'holder:$i', '1 hour')")" ] ||
    { log "FAILED: holder:$i cannot renew held:$i"; exit 1; }
done
next=$(sql node2 "SELECT dlock_acquire('churn', 'after-failover', '1 hour')")
[ "$next" -gt "$highest" ] || { log "FAILED: fence $next after the failover, $highest before"; exit 1; }
log "OK: 20 leases kept (renewed by their owners), fence $next after the failover > $highest"

log "node1 rejoins"
start_node node1
wait_for 120 "node1 synchronous standby again" curl -sf "http://$(rest node1)/sync"
sql node2 "SELECT dlock_acquire('rejoined', 'o', '1 hour')" >/dev/null
log "OK: node1 rejoined as the synchronous standby"
