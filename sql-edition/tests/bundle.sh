#!/usr/bin/env bash
# The three installs carry exactly the same SQL, the one the other tests run (the one-file
# install): the pg_tle bundle's install_extension argument and the database.dev script are the
# body byte for byte; the one-file install is the body in one transaction. And the body
# carries the native extension's bootstrap.sql with exactly one line adapted.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
out=$BUILD/sql-edition
OUT=$out bash "$SQLED/build.sh" >/dev/null
body=$out/dlock--0.3.0.body.sql

# pg_tle: what lies between the quote tags.
awk '/^\$_pgtle_\$$/ { n++; next } n == 1' "$out/dlock-pgtle--0.3.0.sql" >"$out/check.pgtle.sql"
cmp -s "$body" "$out/check.pgtle.sql" || fail "the pg_tle bundle does not carry the body exactly"
grep -q "^SELECT pgtle.install_extension($" "$out/dlock-pgtle--0.3.0.sql" || fail "the pg_tle bundle does not call pgtle.install_extension"
[ "$(grep -c '^\$_pgtle_\$$' "$out/dlock-pgtle--0.3.0.sql")" = 2 ] || fail "the pg_tle bundle's quote tag appears other than twice"
# database.dev
cmp -s "$body" "$out/dbdev/dlock--0.3.0.sql" || fail "the database.dev script is not the body"
grep -q "^default_version = '0.3.0'$" "$out/dbdev/dlock.control" || fail "dbdev/dlock.control"
# The one file: BEGIN, the body, COMMIT.
sed '1,2d;$d' "$out/dlock-sql--0.3.0.sql" >"$out/check.file.sql"
cmp -s "$body" "$out/check.file.sql" || fail "the one-file install is not the body"
[ "$(sed -n 2p "$out/dlock-sql--0.3.0.sql")" = "BEGIN;" ] && [ "$(tail -n 1 "$out/dlock-sql--0.3.0.sql")" = "COMMIT;" ] ||
  fail "the one-file install is not one transaction"
# The shared bootstrap: one line differs (pg_extension_config_dump, outside CREATE EXTENSION).
awk '/^-- ==== extension\/src\/schema\/bootstrap.sql/ { on = 1; next } /^-- ==== / { on = 0 } on' "$body" >"$out/check.bootstrap.sql"
changed=$(diff "$ROOT/extension/src/schema/bootstrap.sql" "$out/check.bootstrap.sql" | grep -c '^[<>]' || true)
[ "$changed" = 2 ] || fail "bootstrap.sql is not carried with exactly one line adapted ($changed lines differ)"
# The update: its code is every function and view of the body (CREATE made CREATE OR REPLACE)
# and nothing else the body creates; the one-file update is BEGIN, the check, the code, COMMIT.
update=$out/dlock--0.3.0.update.sql
diff <(grep -E '^CREATE (FUNCTION|VIEW) ' "$body") \
     <(grep -E '^CREATE ' "$update" | sed 's/^CREATE OR REPLACE /CREATE /') >/dev/null ||
  fail "the update's code does not replace exactly the body's functions and views"
[ "$(grep -cE '^CREATE (FUNCTION|VIEW) ' "$update")" = 0 ] || fail "the update's code creates without OR REPLACE"
{ echo "BEGIN;"; sed "s/@VERSION@/0.3.0/g; s/@FROM@//" "$SQLED/update_check.sql"; cat "$update"; echo "COMMIT;"; } >"$out/check.update.sql"
sed '1,2d' "$out/dlock-sql-update--0.3.0.sql" | cmp -s - "$out/check.update.sql" || fail "the one-file update is not the check and the code in one transaction"
# A next release's update paths (pg_tle, database.dev) carry its code byte for byte.
OUT=$out/next SQLED_VERSION=0.3.1 SQLED_UPDATE_FROM=0.3.0 bash "$SQLED/build.sh" >/dev/null
awk '/^\$_pgtle_\$$/ { n++; next } n == 1' "$out/next/dlock-pgtle--0.3.0--0.3.1.sql" >"$out/check.pgtle-update.sql"
cmp -s "$out/next/dlock--0.3.1.update.sql" "$out/check.pgtle-update.sql" || fail "the pg_tle update path does not carry the code exactly"
grep -q "^SELECT pgtle.install_update_path($" "$out/next/dlock-pgtle--0.3.0--0.3.1.sql" || fail "the pg_tle update path does not call pgtle.install_update_path"
cmp -s "$out/next/dlock--0.3.1.update.sql" "$out/next/dbdev/dlock--0.3.0--0.3.1.sql" || fail "the database.dev update script is not the code"
grep -q "'sql 0.3.1'" "$out/next/dlock--0.3.1.update.sql" || fail "the next release's code does not say its release"
echo "bundle: the one-file install, the pg_tle bundle and the database.dev script carry the same SQL; bootstrap.sql with one line adapted; the update files carry the code exactly"
