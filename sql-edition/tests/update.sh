#!/usr/bin/env bash
# Updating an installed edition in place, with the one-file update (dlock-sql-update--<v>.sql):
# to this release again (the code put back) and to a next release built from this source
# (SQLED_VERSION=0.3.1, SQLED_UPDATE_FROM=0.3.0: what a user runs when the next release comes), while
# sessions take and release keys. Leases of every kind (a TTL lease, a session-bound one whose
# session stays, a semaphore's holder) carry over, fences keep growing, the security model
# stays (owners, pinned search_path, PUBLIC's grants), and nothing is duplicated. Refused before
# anything changes: a superuser who is not the installer, the wrong schema, a database without
# the edition, a release taken back.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sqled_cluster update
load=
cleanup() { [ -z "$load" ] || kill "$load" 2>/dev/null; sqled_destroy; }
trap cleanup EXIT
this=$BUILD/sql-edition/dlock-sql-update--0.3.0.sql
next_dir=$BUILD/sql-edition/next
rm -rf "$next_dir"
OUT=$next_dir SQLED_VERSION=0.3.1 SQLED_UPDATE_FROM=0.3.0 bash "$SQLED/build.sh" >/dev/null
next=$next_dir/dlock-sql-update--0.3.1.sql
q postgres "CREATE ROLE alice LOGIN; CREATE ROLE bob LOGIN" >/dev/null

# update USER FILE [SCHEMA]: runs the update file as USER with SET search_path = SCHEMA (dlock).
update() {
  psql -X -q -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -U "$1" -d "${DB:-app}" -c "SET search_path = ${3:-dlock}" -f "$2" 2>&1
}
# refused USER FILE SCHEMA SQLSTATE TEXT: the update fails so, and the edition is as it was.
refused() {
  local out before
  before=$(q postgres "SELECT dlock_internal.edition() || ' ' || count(*) FROM pg_proc WHERE pronamespace IN ('dlock'::regnamespace, 'dlock_internal'::regnamespace)")
  out=$(update "$1" "$2" "$3") && fail "the update as $1 in schema $3 was not refused: $out"
  grep -q "ERROR:  $4" <<<"$out" || fail "the update as $1 in schema $3: want SQLSTATE $4, got: $out"
  grep -qF "$5" <<<"$out" || fail "the update as $1 in schema $3: want '$5' in: $out"
  expect postgres "SELECT dlock_internal.edition() || ' ' || count(*) FROM pg_proc WHERE pronamespace IN ('dlock'::regnamespace, 'dlock_internal'::regnamespace)" "$before"
}
# The security model, as security.sh checks it after the install.
secure() {
  expect postgres "SELECT count(*) FROM pg_proc p WHERE p.pronamespace IN ('dlock'::regnamespace, 'dlock_internal'::regnamespace)
    AND (p.proowner <> 'app_owner'::regrole OR (p.prosecdef AND p.proconfig IS DISTINCT FROM ARRAY['search_path=pg_catalog, pg_temp'])
         OR (p.pronamespace = 'dlock'::regnamespace AND NOT p.prosecdef))" 0
  expect postgres "SELECT string_agg(p.proname, ',') FROM pg_proc p
    WHERE p.pronamespace = 'dlock_internal'::regnamespace AND has_function_privilege('public', p.oid, 'EXECUTE')" lock_rows
  expect_error bob "SELECT * FROM dlock_internal.lease" 42501
  expect bob "SELECT has_table_privilege('dlock.dlock_locks', 'SELECT')" t
}
functions=$(q postgres "SELECT count(*) FROM pg_proc WHERE pronamespace IN ('dlock'::regnamespace, 'dlock_internal'::regnamespace)")

# Leases of every kind.
ttl=$(q alice "SELECT dlock_acquire('u:ttl', 'alice-1', '1 hour')")
in_background alice upd-bound "SELECT dlock_acquire('u:bound', 'alice-b', NULL)"
eventually alice "SELECT count(*) FROM dlock_locks WHERE key = 'u:bound'" 1
expect alice "SELECT dlock_acquire_shared('u:sem', 'alice-s', '1 hour', max_holders => 2) > 0" t
max=$(q postgres "SELECT max(fence) FROM dlock_internal.lease")

# Refused, changing nothing.
refused postgres "$this" dlock 42501 "only app_owner, the role that installed dlock, may update it"
refused app_owner "$this" public 55000 "dlock's public functions are in schema dlock, not in public"
q postgres "CREATE DATABASE bare OWNER app_owner" >/dev/null
out=$(DB=bare update app_owner "$this") && fail "an update without the edition installed: $out"
grep -q "ERROR:  55000" <<<"$out" && grep -qF "not installed in this database" <<<"$out" || fail "an update without the edition: $out"

# The updates, while bob's four sessions take and release keys: every call answers (a grant
# NULL or a release false divides by zero, which ends pgbench with an error).
cat >"$SQLED_DIR/load.sql" <<'SQL'
SELECT 1 / (dlock_acquire('u:load:' || :client_id, 'bob', '1 minute') IS NOT NULL)::int;
SELECT 1 / dlock_release('u:load:' || :client_id, 'bob')::int;
SQL
"$("$PG_CONFIG" --bindir)/pgbench" -n -U bob -d app -c 4 -T 6 -f "$SQLED_DIR/load.sql" >"$SQLED_DIR/load.log" 2>&1 &
load=$!
sleep 1
out=$(update app_owner "$this") || fail "the update to this release again: $out"
expect app_owner "SELECT dlock_internal.edition()" "sql 0.3.0"
out=$(update app_owner "$next") || fail "the update to 0.3.1: $out"
expect app_owner "SELECT dlock_internal.edition()" "sql 0.3.1"
out=$(update app_owner "$next") || fail "the update to 0.3.1 again: $out"
wait "$load" || { cat "$SQLED_DIR/load.log"; fail "a call failed during the updates"; }
load=
grep -q "number of failed transactions: 0" "$SQLED_DIR/load.log" || { cat "$SQLED_DIR/load.log"; fail "pgbench counted failed transactions"; }
pairs=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$SQLED_DIR/load.log")

# Taken back: refused.
refused app_owner "$this" dlock 55000 "not from sql 0.3.1"

# Everything carried over.
expect postgres "SELECT count(*) FROM pg_proc WHERE pronamespace IN ('dlock'::regnamespace, 'dlock_internal'::regnamespace)" "$functions"
secure
expect alice "SELECT dlock_holds('u:ttl', $ttl)" t
expect bob "SELECT dlock_acquire('u:ttl', 'bob-1', '1 minute') IS NULL" t
expect bob "SELECT dlock_acquire('u:bound', 'bob-1', '1 minute') IS NULL" t
expect bob "SELECT dlock_acquire_shared('u:sem', 'bob-s', '1 minute', max_holders => 2) > 0" t
expect bob "SELECT dlock_acquire_shared('u:sem', 'bob-t', '1 minute', max_holders => 2) IS NULL" t
expect alice "SELECT dlock_acquire('u:new', 'alice-1', '1 minute') > $max" t
expect alice "SELECT dlock_release('u:ttl', 'alice-1')" t
expect_error bob "SELECT dlock_release('u:sem', 'alice-s')" 42501
# The session-bound lease ends with its session, as before the update.
end_sessions upd-bound
expect bob "SELECT dlock_acquire('u:bound', 'bob-1', '1 minute') IS NOT NULL" t
echo "update: to 0.3.0 again and to 0.3.1 as $pairs pairs ran beside them; leases, fences and the security model carried over; 4 wrong updates refused"
