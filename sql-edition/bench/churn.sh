#!/usr/bin/env bash
# A churn of KEYS distinct keys (default 1,000,000) through the SQL edition, as on a managed
# service (no dlock library, no background worker, no pg_cron): 8 clients each take a new key and
# release it, in 10 steps; after each step, the lease table's rows, its heap and index sizes.
# The grants' page sweeps are all that keep it bounded (settings as installed: sweep_after 5 s),
# with autovacuum at NAPTIME (default 10 s, as the native churn in bench/suite; PostgreSQL's
# default is 1 min). A benchmark, not a test: it asserts nothing.
source "$(dirname "${BASH_SOURCE[0]}")/../tests/lib.sh"
KEYS=${KEYS:-1000000}
NAPTIME=${NAPTIME:-10s}
CLIENTS=8
STEPS=10
sqled_cluster bench-churn "autovacuum_naptime = $NAPTIME"
trap sqled_destroy EXIT
bin=$("$PG_CONFIG" --bindir)
cat >"$SQLED_DIR/fresh.sql" <<'SQL'
\set k random(1, 9000000000000000)
SELECT dlock_acquire('churn:' || :k, 'o' || :client_id, '30 seconds');
SELECT dlock_release('churn:' || :k, 'o' || :client_id);
SQL
size() {
  q app_owner "SELECT count(*) || ' | ' || pg_relation_size('dlock_internal.lease') / 1024 || ' | '
                      || pg_indexes_size('dlock_internal.lease') / 1024 || ' | '
                      || (SELECT autovacuum_count FROM pg_stat_all_tables WHERE relid = 'dlock_internal.lease'::regclass)
                 FROM dlock_internal.lease"
}
echo "SQL edition, a churn of $KEYS keys, $CLIENTS clients, autovacuum_naptime $NAPTIME ($("$PG_CONFIG" --version))"
echo
echo "| keys | seconds | pairs/s | rows | heap kB | indexes kB | autovacuums |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
echo "| 0 | 0 | | $(size) |"
per=$((KEYS / STEPS / CLIENTS))
start=$(date +%s.%N)
for step in $(seq 1 $STEPS); do
  t0=$(date +%s.%N)
  "$bin/pgbench" -n -M prepared -c $CLIENTS -j 2 -t "$per" -U app_owner -f "$SQLED_DIR/fresh.sql" app >"$SQLED_DIR/pgbench.log" 2>&1 ||
    { cat "$SQLED_DIR/pgbench.log"; fail "pgbench failed"; }
  t1=$(date +%s.%N)
  echo "| $((step * per * CLIENTS)) | $(printf '%.0f' "$(echo "$t1 - $start" | bc)") | $(printf '%.0f' "$(echo "$per * $CLIENTS / ($t1 - $t0)" | bc -l)") | $(size) |"
done
