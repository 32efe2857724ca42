#!/usr/bin/env bash
# dlock's metrics through a real Prometheus (Debian's prometheus and prometheus-postgres-exporter,
# installed if missing): a cluster with dlock preloaded (schema dlock), the exporter with
# docs/deploy/prometheus/dlock-queries.yaml, the CLI's `dlock metrics --listen` (target/release/dlock
# from `make cli` if built, else the debug build, built here if missing), and a Prometheus
# scraping both every second with docs/deploy/prometheus/dlock-alerts.yml loaded.
# A rate-limited workload (pgbench -R) runs meanwhile; then, through Prometheus' HTTP API:
#   - rate(dlock_grants_total[30s]) of each source is within 20 % of the workload's rate;
#   - a lease that expired while its holder stayed connected fires DlockLeaseExpiredUnderConnectedHolder.
# Fails with a message on stderr otherwise.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$root/build}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
pg_bin=$("$PG_CONFIG" --bindir)
dir="$BUILD/prometheus-test"
cluster="$dir/cluster"
cluster_sh="$root/tests/scripts/cluster.sh"
rate=${PROMETHEUS_TEST_RATE:-100}
seconds=45

if ! command -v prometheus >/dev/null || ! command -v prometheus-postgres-exporter >/dev/null; then
  echo "prometheus-test: installing prometheus and prometheus-postgres-exporter"
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq prometheus prometheus-postgres-exporter >/dev/null
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  bash "$cluster_sh" stop "$cluster" fast >/dev/null 2>&1 || true
}
trap cleanup EXIT
bash "$cluster_sh" destroy "$cluster" >/dev/null 2>&1 || true
rm -rf "$dir"
mkdir -p "$dir"
eval "$(env -u RUST_BACKTRACE bash "$cluster_sh" start "$cluster" "shared_preload_libraries = 'dlock'")"
psql_() { "$pg_bin/psql" -X -q -At -v ON_ERROR_STOP=1 -d postgres "$@"; }
psql_ -c "CREATE SCHEMA dlock" -c "CREATE EXTENSION dlock SCHEMA dlock"

exporter_port=$(free_port)
DATA_SOURCE_NAME="postgresql://postgres@127.0.0.1:$PGPORT/postgres?sslmode=disable" \
  prometheus-postgres-exporter --web.listen-address="127.0.0.1:$exporter_port" \
  --extend.query-path="$root/docs/deploy/prometheus/dlock-queries.yaml" \
  --disable-default-metrics --disable-settings-metrics >"$dir/exporter.log" 2>&1 &
pids+=($!)
targets="'127.0.0.1:$exporter_port'"
jobs=(exporter)

# The CLI's own endpoint: the release build if there is one with `metrics`, else the debug build.
target="${CARGO_TARGET_DIR:-$root/target}"
cli=
for candidate in "$target/release/dlock" "$target/debug/dlock"; do
  if [ -x "$candidate" ] && "$candidate" metrics --help >/dev/null 2>&1; then cli=$candidate; break; fi
done
if [ -z "$cli" ]; then
  echo "prometheus-test: building the dlock CLI (debug)"
  (cd "$root" && cargo build -q -p dlock-cli)
  cli="$target/debug/dlock"
fi
cli_port=$(free_port)
"$cli" metrics --listen "127.0.0.1:$cli_port" \
  --database-url "postgresql://postgres@127.0.0.1:$PGPORT/postgres" >"$dir/cli.log" 2>&1 &
pids+=($!)
jobs+=(cli)

prom_port=$(free_port)
{
  echo "global: {scrape_interval: 1s, evaluation_interval: 1s}"
  echo "rule_files: ['$root/docs/deploy/prometheus/dlock-alerts.yml']"
  echo "scrape_configs:"
  echo "  - job_name: exporter"
  echo "    static_configs: [{targets: [$targets]}]"
  echo "  - job_name: cli"
  echo "    static_configs: [{targets: ['127.0.0.1:$cli_port']}]"
} >"$dir/prometheus.yml"
promtool check config "$dir/prometheus.yml" >/dev/null
prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$dir/prometheus.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$prom_port/-/ready" >/dev/null 2>&1 && break; sleep 0.2; done

query() { curl -fsG "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$1"; }
value() { python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(sum(float(x["value"][1]) for x in r) if r else "")'; }

cat >"$dir/pair.sql" <<'SQL'
\set k random(1, 1000000)
SELECT dlock.dlock_acquire('prometheus:' || :k, 'o' || :client_id, '30 seconds');
SELECT dlock.dlock_release('prometheus:' || :k, 'o' || :client_id);
SQL
"$pg_bin/pgbench" -n -c 4 -j 2 -R "$rate" -T "$seconds" -f "$dir/pair.sql" postgres >"$dir/pgbench.log" 2>&1 &
workload=$!
# Meanwhile, once Prometheus has a few samples: a lease that expires under a connected holder
# (its session sleeps past the ttl) and is taken over, for the alert.
sleep 5
psql_ -c "SELECT dlock.dlock_acquire('prometheus:paused', 'paused', '1 second')" -c "SELECT pg_sleep(3)" >/dev/null &
psql_ -c "SELECT pg_sleep(1.5); SELECT dlock.dlock_acquire('prometheus:paused', 'next', '1 hour')" >/dev/null
wait "$workload"
actual=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$dir/pgbench.log")

status=0
for job in "${jobs[@]}"; do
  measured=$(query "sum(rate(dlock_grants_total{job=\"$job\"}[30s]))" | value)
  ok=$(awk -v m="${measured:-0}" -v a="$actual" 'BEGIN { d = (m - a) / a; if (d < 0) d = -d; print (m != "" && d <= 0.2) ? "yes" : "no" }')
  echo "prometheus-test: $job: rate(dlock_grants_total[30s]) = ${measured:-none}/s, workload $actual/s: within 20 %: $ok"
  [ "$ok" = yes ] || { echo "prometheus-test: $job's rate is off (see $dir)" >&2; status=1; }
done
firing=$(curl -fs "http://127.0.0.1:$prom_port/api/v1/alerts" | python3 -c '
import json, sys
alerts = json.load(sys.stdin)["data"]["alerts"]
print(" ".join(sorted({a["labels"]["alertname"] for a in alerts if a["state"] == "firing"})))')
echo "prometheus-test: firing: ${firing:-none}"
case " $firing " in
  *" DlockLeaseExpiredUnderConnectedHolder "*) ;;
  *) echo "prometheus-test: DlockLeaseExpiredUnderConnectedHolder did not fire (see $dir)" >&2; status=1 ;;
esac
echo "prometheus-test: a sample scrape of the exporter:"
curl -fs "http://127.0.0.1:$exporter_port/metrics" | grep -E '^dlock_(grants_total|wait_seconds_count|leases_live|expiries_while_connected_total)' | head -8
echo "prometheus-test: the start of a scrape of $cli metrics (whole in $dir/cli-scrape.txt):"
curl -fs "http://127.0.0.1:$cli_port/metrics" >"$dir/cli-scrape.txt" || { echo "prometheus-test: scraping the CLI failed" >&2; status=1; }
head -30 "$dir/cli-scrape.txt"
exit "$status"
