#!/usr/bin/env bash
# The lease table stays bounded under a churn of new keys, with no background worker: 20,000
# keys taken and released once each (settings.sweep_after = 0) leave a fraction of the rows,
# swept by the grants themselves; dlock_sweep(), called until it changes nothing, then empties
# it of everything that is over.
# (Without the grants' page sweeps the table would keep all 20,000 rows.) Then the grants of
# keys used again, which add no row, sweep the rows of keys taken once.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sqled_cluster churn
trap sqled_destroy EXIT
# pgbench_as_owner FILE CLIENTS TRANSACTIONS: FILE (in $SQLED_DIR) run by app_owner.
pgbench_as_owner() {
  "$("$PG_CONFIG" --bindir)/pgbench" -n -c "$2" -j "$2" -t "$3" -U app_owner -f "$SQLED_DIR/$1" app >"$SQLED_DIR/pgbench.log" 2>&1 ||
    { cat "$SQLED_DIR/pgbench.log"; fail "pgbench failed"; }
}
q app_owner "UPDATE dlock_internal.settings SET sweep_after = '0'" >/dev/null
cat >"$SQLED_DIR/fresh.sql" <<'SQL'
\set k random(1, 1000000000)
SELECT dlock_acquire('c' || :client_id || ':' || :k, 'o' || :client_id, '30 seconds');
SELECT dlock_release('c' || :client_id || ':' || :k, 'o' || :client_id);
SQL
pgbench_as_owner fresh.sql 4 5000
rows=$(q app_owner "SELECT count(*) FROM dlock_internal.lease")
pages=$(q app_owner "SELECT pg_relation_size('dlock_internal.lease') / 8192")
echo "churn: 20000 keys taken and released: $rows rows left on $pages pages"
[ "$rows" -lt 4000 ] || fail "the grants' sweeps left $rows of 20000 rows"
q app_owner "SELECT dlock_acquire('live', 'o', '1 hour')" >/dev/null
# sweep_all: dlock_sweep() until it changes nothing (each call its own transaction); how many calls.
sweep_all() {
  local calls=1
  while [ "$(q app_owner "SELECT dlock_sweep()")" != 0 ]; do
    calls=$((calls + 1))
    [ "$calls" -lt 100 ] || fail "dlock_sweep() still changes rows after $calls calls"
  done
  echo "$calls"
}
calls=$(sweep_all)
expect app_owner "SELECT count(*) FROM dlock_internal.lease" 1
echo "churn: $calls calls of dlock_sweep() left the one live lease"

# Grants that write over a key row sweep a page too, one in eight (sweep_later): 2,000 keys
# taken once while their rows were not due (their grants' sweeps found nothing to delete) are
# cleared, once due, by the grants of keys used again, which add no row. (Without those sweeps
# every one of the 2,000 rows would stay until a dlock_sweep().)
# (The table first back to one page: the churn above left it on thousands, nearly empty.)
q app_owner "VACUUM FULL dlock_internal.lease" >/dev/null
q app_owner "UPDATE dlock_internal.settings SET sweep_after = '1 hour'" >/dev/null
pgbench_as_owner fresh.sql 2 1000
before=$(q app_owner "SELECT count(*) FROM dlock_internal.lease")
[ "$before" -gt 1900 ] || fail "the rows of the keys taken once went before they were due: $before left"
q app_owner "UPDATE dlock_internal.settings SET sweep_after = '0'" >/dev/null
cat >"$SQLED_DIR/reuse.sql" <<'SQL'
SELECT dlock_acquire('again:' || :client_id, 'o' || :client_id, '30 seconds');
SELECT dlock_release('again:' || :client_id, 'o' || :client_id);
SQL
pgbench_as_owner reuse.sql 2 1000
after=$(q app_owner "SELECT count(*) FROM dlock_internal.lease")
pages=$(q app_owner "SELECT pg_relation_size('dlock_internal.lease') / 8192")
echo "churn: 2000 grants of 2 keys used again swept the rows of keys taken once: $before rows, then $after ($pages pages)"
[ "$after" -lt $((before * 3 / 4)) ] || fail "the grants of keys used again swept nothing: $before rows, then $after"

# A backlog larger than one transaction's sweeps or one dlock_sweep() take (an expiry storm, say): each call locks at most
# 16 x max_locks_per_transaction rows (1,024 here), each row's locks held to its commit in the
# lock table every session shares: a sweep of them all at once ran out of it. Calls, each its own
# transaction, clear it; bad limits are refused.
q app_owner "VACUUM FULL dlock_internal.lease" >/dev/null
q app_owner "UPDATE dlock_internal.settings SET sweep_after = '1 hour'" >/dev/null
cat >"$SQLED_DIR/storm.sql" <<'SQL'
\set k random(1, 1000000000)
SELECT dlock_acquire('storm:' || :k, 'o', '1 millisecond');
SQL
pgbench_as_owner storm.sql 4 3000
backlog=$(q app_owner "SELECT count(*) FROM dlock_internal.lease")
[ "$backlog" -gt 11000 ] || fail "the storm left $backlog rows"
q app_owner "UPDATE dlock_internal.settings SET sweep_after = '0'" >/dev/null
# A transaction that takes 2,000 new keys meanwhile sweeps as it commits, one page per row it
# added, but locks at most 512 rows (8 x max_locks_per_transaction) there: unbounded, its
# COMMIT failed ("out of shared memory").
out=$(psql -X -q -At -v ON_ERROR_STOP=1 -U app_owner -d app -c "BEGIN" \
  -c "SELECT count(dlock_acquire('batch:' || i, 'o', '1 minute')) FROM generate_series(1, 2000) AS i" -c "COMMIT" 2>&1) ||
  fail "a transaction of 2,000 new keys over $backlog due rows did not commit: $out"
rows=$(q app_owner "SELECT count(*) FROM dlock_internal.lease")
swept=$((backlog + 2000 - rows))
[ "$swept" -gt 0 ] && [ "$swept" -le 512 ] || fail "the commit of 2,000 new keys swept $swept rows, want 1 to 512"
echo "churn: a transaction of 2,000 new keys over $backlog due rows committed, sweeping $swept of them"
q app_owner "SELECT dlock_release_all('o')" >/dev/null
backlog=$(q app_owner "SELECT count(*) FROM dlock_internal.lease")
expect_error app_owner "SELECT dlock_sweep(0)" 22023 "max_rows must be between 1 and 1024"
expect_error app_owner "SELECT dlock_sweep(1025)" 22023 "16 x max_locks_per_transaction"
expect app_owner "SELECT dlock_sweep(10)" 10
first=$(q app_owner "SELECT dlock_sweep()")
[ "$first" = 1024 ] || fail "a call of dlock_sweep() over $backlog due rows changed $first, want 1024"
calls=$(( $(sweep_all) + 2 ))
expect app_owner "SELECT count(*) FROM dlock_internal.lease WHERE key LIKE 'storm:%'" 0
echo "churn: a backlog of $backlog expired leases cleared by $calls calls of dlock_sweep(), each at most 1024 rows"
