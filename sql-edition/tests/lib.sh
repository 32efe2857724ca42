# Shared by the SQL edition's test scripts: a cluster of our own with the edition installed
# by a non-superuser database owner.
source "$(dirname "${BASH_SOURCE[0]}")/../../tests/scripts/common.sh"
SQLED=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=$(cd "$SQLED/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
export PG_CONFIG
CLUSTER_SH="$ROOT/tests/scripts/cluster.sh"

# sqled_cluster NAME [postgresql.conf lines...]: a fresh cluster in $BUILD/sql-edition/NAME,
# database "app" owned by role "app_owner" (LOGIN CREATEROLE, no superuser), the edition
# installed by it in schema "dlock"; exports PGHOST, PGPORT, SQLED_DIR.
sqled_cluster() {
  local name=$1
  shift
  SQLED_DIR=$BUILD/sql-edition/$name
  bash "$CLUSTER_SH" destroy "$SQLED_DIR"
  eval "$(bash "$CLUSTER_SH" start "$SQLED_DIR" "$@")"
  export PGHOST PGPORT SQLED_DIR
  local file
  file=$(OUT=$BUILD/sql-edition bash "$SQLED/build.sh" | tail -n 1)
  psql -X -q -v ON_ERROR_STOP=1 -U postgres -d postgres \
    -c "CREATE ROLE app_owner LOGIN CREATEROLE" -c "CREATE DATABASE app OWNER app_owner" >/dev/null
  psql -X -q -v ON_ERROR_STOP=1 -U app_owner -d app -c "CREATE SCHEMA dlock" -c "GRANT USAGE ON SCHEMA dlock TO PUBLIC" -c "SET search_path = dlock" -f "$file" >/dev/null
  psql -X -q -v ON_ERROR_STOP=1 -U postgres -d app -c "ALTER DATABASE app SET search_path = dlock, public" >/dev/null
}

sqled_stop() { bash "$CLUSTER_SH" stop "$SQLED_DIR" "${1:-fast}"; }
sqled_start() { eval "$(bash "$CLUSTER_SH" start "$SQLED_DIR")"; export PGHOST PGPORT; }
sqled_destroy() { bash "$CLUSTER_SH" destroy "$SQLED_DIR"; }

# q USER SQL: one value, as USER in database app.
q() { psql -X -q -At -v ON_ERROR_STOP=1 -U "$1" -d app -c "$2"; }

fail() { echo "${0##*/}: FAILED: $*" >&2; exit 1; }

# expect USER SQL WANT: the one value SQL gives as USER is WANT.
expect() {
  local got
  got=$(q "$1" "$2" 2>&1) || fail "$2 as $1: $got"
  [ "$got" = "$3" ] || fail "$2 as $1: got '$got', want '$3'"
}

# eventually USER SQL WANT: SQL comes to give WANT as USER within 5 s (polled every 0.1 s);
# the last answer is then checked with expect, so a miss fails with what it got.
eventually() {
  local i
  for i in $(seq 1 50); do
    [ "$(q "$1" "$2" 2>/dev/null)" = "$3" ] && return 0
    sleep 0.1
  done
  expect "$@"
}

# in_background USER APP SQL: SQL as USER in a session named APP, which then sleeps, keeping
# what it took (a holder, a blocker) until end_sessions ends it.
in_background() {
  psql -X -q -U "$1" -d app -c "SET application_name = '$2'" -c "$3" -c "SELECT pg_sleep(60)" >/dev/null 2>&1 &
}

# end_sessions APP...: terminates the sessions named APP and waits until they are gone.
end_sessions() {
  local app
  for app in "$@"; do
    q postgres "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '$app'" >/dev/null
    eventually postgres "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$app'" 0
  done
}

# expect_error USER SQL SQLSTATE [TEXT]: SQL fails as USER with SQLSTATE (and TEXT in the message).
expect_error() {
  local out
  out=$(psql -X -q -At -U "$1" -d app -v VERBOSITY=verbose -c "$2" 2>&1) && fail "$2 as $1: no error (got '$out')"
  grep -q "ERROR:  $3" <<<"$out" || fail "$2 as $1: want SQLSTATE $3, got: $out"
  [ -z "${4:-}" ] || grep -qF "$4" <<<"$out" || fail "$2 as $1: want '$4' in: $out"
}
