#!/usr/bin/env bash
# Builds the SQL-only edition from one source (sql-edition/src/*.sql, in name order, with the
# native extension's extension/src/schema/bootstrap.sql in place of 10_bootstrap.sql):
#   $OUT/dlock--0.3.0.body.sql   the edition's SQL, as tested (no transaction control)
#   $OUT/dlock-sql--0.3.0.sql    the one-file install: the body in one transaction
#   $OUT/dlock-pgtle--0.3.0.sql  the pg_tle bundle: pgtle.install_extension(..., body)
#   $OUT/dbdev/                  a database.dev package: dlock.control, dlock--0.3.0.sql
# Prints the one-file install's path as its last line.
source "$(dirname "${BASH_SOURCE[0]}")/../tests/scripts/common.sh"

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
OUT=${OUT:-${BUILD:-$root/build}/sql-edition}
VERSION=0.3.0
mkdir -p "$OUT/dbdev"

body="$OUT/dlock--$VERSION.body.sql"
{
  for f in "$here"/src/*.sql; do
    echo "-- ==== sql-edition/src/$(basename "$f")"
    if [ "$(basename "$f")" = 10_bootstrap.sql ]; then
      cat "$f"
      echo "-- ==== extension/src/schema/bootstrap.sql (shared with the native edition)"
      # The one adaptation: pg_extension_config_dump works only inside CREATE EXTENSION (the
      # pg_tle and database.dev installs); a plain-file install goes on without it (there
      # pg_dump dumps the sequence, with its position, as an ordinary object anyway).
      sed "s|^SELECT pg_catalog.pg_extension_config_dump('dlock_internal.fence_seq', '');\$|DO \$dump\$ BEGIN PERFORM pg_catalog.pg_extension_config_dump('dlock_internal.fence_seq'::pg_catalog.regclass, ''::pg_catalog.text); EXCEPTION WHEN feature_not_supported OR object_not_in_prerequisite_state THEN NULL; END \$dump\$;|" \
        "$root/extension/src/schema/bootstrap.sql"
    else
      cat "$f"
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

{
  echo "-- dlock $VERSION, SQL-only edition: run as the database owner with SET search_path = <schema>."
  echo "BEGIN;"
  cat "$body"
  echo "COMMIT;"
} >"$OUT/dlock-sql--$VERSION.sql"

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

cp "$body" "$OUT/dbdev/dlock--$VERSION.sql"
cat >"$OUT/dbdev/dlock.control" <<CONTROL
default_version = '$VERSION'
comment = 'Distributed locks (leases with fencing tokens) inside PostgreSQL: SQL-only edition'
relocatable = false
superuser = false
CONTROL
cp "$here/README.md" "$OUT/dbdev/README.md" 2>/dev/null || true

echo "$OUT/dlock-sql--$VERSION.sql"
