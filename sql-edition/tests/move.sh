#!/usr/bin/env bash
# Moving to the native extension (sql-edition/move-to-native.sql), in place and after a dump of
# an SQL-edition database restored elsewhere: fences keep growing, TTL leases carry over.
# Needs the native extension installed in the PostgreSQL under test (PG_CONFIG).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
lib=$("$PG_CONFIG" --pkglibdir)/dlock.so
for i in $(seq 1 60); do [ -f "$lib" ] && break; sleep 1; done   # another `make install` may be moving it
[ -f "$lib" ] || fail "the native extension is not installed ($lib)"
sqled_cluster move
trap sqled_destroy EXIT
q postgres "CREATE ROLE alice LOGIN" >/dev/null

# Leases and fences in the SQL edition.
expect alice "SELECT dlock_acquire('m:held', 'alice-1', '1 hour') > 0" t
max=0
for i in $(seq 1 40); do
  f=$(q alice "SELECT dlock_acquire('m:churn', 'alice-1', '1 hour')")
  q alice "SELECT dlock_release('m:churn', 'alice-1')" >/dev/null
  [ "$f" -gt "$max" ] && max=$f
done
expect alice "SELECT dlock_acquire('m:bound', 'alice-1', NULL) > 0" t
q postgres "SELECT setval('dlock_internal.fence_seq', 5)" >/dev/null   # a sequence set back: the rows still count

check_native() {
  local db=$1
  [ "$(psql -X -q -At -U postgres -d "$db" -c "SELECT l.lanname FROM pg_extension e, pg_proc p JOIN pg_language l ON l.oid = p.prolang
        WHERE e.extname = 'dlock' AND p.proname = 'dlock_acquire' LIMIT 1")" = c ] || fail "$db: the native extension is not in place"
  # The TTL lease carried over: still alice's, still busy for others, its fence holds.
  psql -X -q -At -v ON_ERROR_STOP=1 -U alice -d "$db" -c "SELECT owner, hold_count FROM dlock_locks WHERE key = 'm:held'" | grep -qx 'alice-1|1' ||
    fail "$db: the lease of m:held did not carry over"
  [ "$(psql -X -q -At -U alice -d "$db" -c "SELECT dlock_acquire('m:held', 'bob-1', '1 minute') IS NULL")" = t ] ||
    fail "$db: m:held was granted to another owner"
  local next
  next=$(psql -X -q -At -v ON_ERROR_STOP=1 -U alice -d "$db" -c "SELECT dlock_acquire('m:churn', 'alice-2', '1 minute')")
  [ "$next" -gt "$max" ] || fail "$db: fence $next after the move, $max before"
  next=$(psql -X -q -At -v ON_ERROR_STOP=1 -U alice -d "$db" -c "SELECT dlock_acquire('m:other', 'alice-2', '1 minute')")
  [ "$next" -gt "$max" ] || fail "$db: a new key's fence $next after the move, $max before"
  # The session-bound lease ended with the switch.
  [ "$(psql -X -q -At -U alice -d "$db" -c "SELECT dlock_acquire('m:bound', 'bob-1', '1 minute') IS NOT NULL")" = t ] ||
    fail "$db: the session-bound lease outlived the switch"
  echo "move ($db): fences $max before, larger after; the TTL lease carried over"
}

# A dump of the SQL-edition database, restored into a new database, then switched.
bin=$("$PG_CONFIG" --bindir)
"$bin/pg_dump" -Fc -U postgres -d app -f "$SQLED_DIR/app.dump"
q postgres "CREATE DATABASE app2 OWNER app_owner" >/dev/null 2>&1 || psql -X -q -U postgres -d postgres -c "CREATE DATABASE app2 OWNER app_owner" >/dev/null
"$bin/pg_restore" -U postgres -d app2 "$SQLED_DIR/app.dump"
psql -X -q -U postgres -d postgres -c "ALTER DATABASE app2 SET search_path = dlock, public" >/dev/null
psql -X -q -U postgres -d app2 -v schema=dlock -f "$SQLED/move-to-native.sql" >/dev/null 2>"$SQLED_DIR/move.log" || { cat "$SQLED_DIR/move.log"; fail "move-to-native.sql failed"; }
check_native app2
# In place.
psql -X -q -U postgres -d app -v schema=dlock -f "$SQLED/move-to-native.sql" >/dev/null 2>"$SQLED_DIR/move.log" || { cat "$SQLED_DIR/move.log"; fail "move-to-native.sql failed"; }
check_native app
