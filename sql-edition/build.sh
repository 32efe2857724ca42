#!/usr/bin/env bash
# Builds the SQL-only edition from one source (sql-edition/src/*.sql, in name order, with the
# native extension's extension/src/schema/bootstrap.sql after 10_bootstrap.state.sql):
#   $OUT/dlock--$V.body.sql           the edition's SQL, as tested (no transaction control)
#   $OUT/dlock-sql--$V.sql            the one-file install: the body in one transaction
#   $OUT/dlock-pgtle--$V.sql          the pg_tle bundle: pgtle.install_extension(..., body)
#   $OUT/dbdev/                       a database.dev package: dlock.control, dlock--$V.sql
#   $OUT/dlock--$V.update.sql         the code again: update_installer.sql (only the installer
#                                     updates), then every function and the view (CREATE OR
#                                     REPLACE), none of the state (the *.state.sql files)
#   $OUT/dlock-sql-update--$V.sql     the one-file update: a check of what is installed, then
#                                     the code, in one transaction (see update_check below)
#   $OUT/dlock-pgtle--$F--$V.sql      pg_tle's update path from each release F in SQLED_UPDATE_FROM
#                                     (pgtle.install_update_path(..., the code))
#   $OUT/dbdev/dlock--$F--$V.sql      the same for database.dev
# Prints the one-file install's path as its last line.
#   SQLED_VERSION      the release ($V)
#   SQLED_UPDATE_FROM  the earlier releases it updates from (the tests build a next release to
#                      update to). A release that changes the state adds, for each release it
#                      updates from, that state's migration before the code.
source "$(dirname "${BASH_SOURCE[0]}")/../tests/scripts/common.sh"

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
OUT=${OUT:-${BUILD:-$root/build}/sql-edition}
# (Names of their own: a VERSION in a shell's environment must not change what is built.)
VERSION=${SQLED_VERSION:-0.3.0}
# Earlier releases of the edition this one updates from (space-separated): none, 0.3.0 is the
# first. The one-file update also runs from this release itself (it puts the code back).
UPDATE_FROM=${SQLED_UPDATE_FROM-}
mkdir -p "$OUT/dbdev"

body="$OUT/dlock--$VERSION.body.sql"
{
  for f in "$here"/src/*.sql; do
    echo "-- ==== sql-edition/src/$(basename "$f")"
    if [ "$(basename "$f")" = 10_bootstrap.state.sql ]; then
      cat "$f"
      echo "-- ==== extension/src/schema/bootstrap.sql (shared with the native edition)"
      # The one adaptation: pg_extension_config_dump works only inside CREATE EXTENSION (the
      # pg_tle and database.dev installs); a plain-file install goes on without it (there
      # pg_dump dumps the sequence, with its position, as an ordinary object anyway).
      sed "s|^SELECT pg_catalog.pg_extension_config_dump('dlock_internal.fence_seq', '');\$|DO \$dump\$ BEGIN PERFORM pg_catalog.pg_extension_config_dump('dlock_internal.fence_seq'::pg_catalog.regclass, ''::pg_catalog.text); EXCEPTION WHEN feature_not_supported OR object_not_in_prerequisite_state THEN NULL; END \$dump\$;|" \
        "$root/extension/src/schema/bootstrap.sql"
    else
      sed "s/@VERSION@/$VERSION/g" "$f"
    fi
  done
} >"$body.tmp"
# The adaptation must have happened exactly once: a changed bootstrap.sql fails the build.
if [ "$(grep -c 'EXCEPTION WHEN feature_not_supported OR object_not_in_prerequisite_state' "$body.tmp")" != 1 ]; then
  echo "sql-edition/build.sh: bootstrap.sql's pg_extension_config_dump line changed; adapt build.sh" >&2
  exit 1
fi
if grep -q '\$_pgtle_\$' "$body.tmp"; then
  echo "sql-edition/build.sh: the body uses the pg_tle bundle's quote tag" >&2
  exit 1
fi
mv "$body.tmp" "$body"

# The code alone, for updates: the files that create no state, each CREATE made a CREATE OR
# REPLACE (which keeps a function's oid, owner and grants: sessions calling it meanwhile go on).
# Anything else such a file creates fails the build: state belongs in a *.state.sql file.
update="$OUT/dlock--$VERSION.update.sql"
{
  echo "-- ==== sql-edition/update_installer.sql"
  cat "$here/update_installer.sql"
  for f in "$here"/src/*.sql; do
    case "$f" in *.state.sql) continue ;; esac
    if [ -n "$(grep -E '^CREATE ' "$f" | grep -vE '^CREATE (FUNCTION|VIEW) ' || true)" ]; then
      echo "sql-edition/build.sh: $(basename "$f") creates state (only functions and views may be replaced): move it to a .state.sql file" >&2
      exit 1
    fi
    echo "-- ==== sql-edition/src/$(basename "$f")"
    sed -e "s/@VERSION@/$VERSION/g" -e 's/^CREATE FUNCTION /CREATE OR REPLACE FUNCTION /' \
        -e 's/^CREATE VIEW /CREATE OR REPLACE VIEW /' "$f"
  done
} >"$update.tmp" || exit 1
mv "$update.tmp" "$update"

{
  echo "-- dlock $VERSION, SQL-only edition: run as the database owner with SET search_path = <schema>."
  echo "BEGIN;"
  cat "$body"
  echo "COMMIT;"
} >"$OUT/dlock-sql--$VERSION.sql"

from_list=
for from in $UPDATE_FROM; do from_list+="'sql $from', "; done
{
  echo "-- dlock $VERSION, SQL-only edition: the update of an installed edition (${UPDATE_FROM:+from ${UPDATE_FROM// /, } or }from"
  echo "-- $VERSION itself) to $VERSION, as the role that installed it, with SET search_path = <its schema>."
  echo "BEGIN;"
  sed -e "s/@VERSION@/$VERSION/g" -e "s/@FROM@/$from_list/" "$here/update_check.sql"
  cat "$update"
  echo "COMMIT;"
} >"$OUT/dlock-sql-update--$VERSION.sql"

{
  echo "-- dlock $VERSION for pg_tle (RDS, Aurora, Supabase): run as a member of pgtle_admin, then"
  echo "-- CREATE EXTENSION dlock SCHEMA dlock; in each database."
  echo "SELECT pgtle.install_extension("
  echo "  'dlock',"
  echo "  '$VERSION',"
  echo "  'Distributed locks (leases with fencing tokens) inside PostgreSQL: SQL-only edition',"
  echo "\$_pgtle_\$"
  cat "$body"
  echo "\$_pgtle_\$"
  echo ");"
} >"$OUT/dlock-pgtle--$VERSION.sql"

for from in $UPDATE_FROM; do
  {
    echo "-- dlock $from to $VERSION for pg_tle: run as a member of pgtle_admin, then"
    echo "-- ALTER EXTENSION dlock UPDATE TO '$VERSION'; in each database."
    echo "SELECT pgtle.install_update_path("
    echo "  'dlock',"
    echo "  '$from',"
    echo "  '$VERSION',"
    echo "\$_pgtle_\$"
    cat "$update"
    echo "\$_pgtle_\$"
    echo ");"
  } >"$OUT/dlock-pgtle--$from--$VERSION.sql"
  cp "$update" "$OUT/dbdev/dlock--$from--$VERSION.sql"
done

cp "$body" "$OUT/dbdev/dlock--$VERSION.sql"
cat >"$OUT/dbdev/dlock.control" <<CONTROL
default_version = '$VERSION'
comment = 'Distributed locks (leases with fencing tokens) inside PostgreSQL: SQL-only edition'
relocatable = false
superuser = false
CONTROL
cp "$here/README.md" "$OUT/dbdev/README.md" 2>/dev/null || true

echo "$OUT/dlock-sql--$VERSION.sql"
