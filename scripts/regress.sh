#!/usr/bin/env bash
# `make test-regress`: the pg_regress expected-output tests. Every sql/NN_name.sql runs in order
# against a fresh cluster in $BUILD/regress-cluster and its output must equal
# sql/expected/NN_name.out. Results and regression.diffs land in $BUILD/regress.
#
#   REGRESS_ACCEPT=1 bash scripts/regress.sh   copy the results over sql/expected/ (then READ them)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$root/build}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
pg_regress="$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress"
cluster="$BUILD/regress-cluster"
cluster_sh="$root/scripts/cluster.sh"
out="$BUILD/regress"

stop_cluster() { bash "$cluster_sh" stop "$cluster" fast; }


tests=()
for file in "$root"/sql/*.sql; do
  tests+=("$(basename "$file" .sql)")
done
if [ ${#tests[@]} -eq 0 ]; then
  echo "regress: no tests in $root/sql" >&2
  exit 2
fi

bash "$cluster_sh" destroy "$cluster"
trap stop_cluster EXIT
# The server must not inherit RUST_BACKTRACE: pgrx would append a Rust backtrace to the
# DETAIL of errors that cross its FFI guard (a cancelled wait's 57014, for one).
eval "$(env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE bash "$cluster_sh" start "$cluster")"

# PG15's pg_regress has no --expecteddir: it reads <inputdir>/sql/T.sql and
# <inputdir>/expected/T.out. Our layout is sql/T.sql and sql/expected/T.out, so point it at a
# directory of two symlinks.
rm -rf "$out"
mkdir -p "$out/input"
ln -s "$root/sql" "$out/input/sql"
ln -s "$root/sql/expected" "$out/input/expected"
mkdir -p "$root/sql/expected"
for t in "${tests[@]}"; do
  [ -f "$root/sql/expected/$t.out" ] && continue
  if [ "${REGRESS_ACCEPT:-0}" = 1 ]; then
    : >"$root/sql/expected/$t.out" # pg_regress stops at a missing expected file
  else
    echo "regress: sql/expected/$t.out is missing (REGRESS_ACCEPT=1 creates it from the results)" >&2
    exit 2
  fi
done

# With --use-existing pg_regress neither creates nor drops the database: we do, with the
# settings it would give one of its own.
psql -X -q -v ON_ERROR_STOP=1 -d postgres <<'SQL'
CREATE DATABASE dlock_regress TEMPLATE template0;
ALTER DATABASE dlock_regress SET lc_messages TO 'C';
ALTER DATABASE dlock_regress SET lc_monetary TO 'C';
ALTER DATABASE dlock_regress SET lc_numeric TO 'C';
ALTER DATABASE dlock_regress SET lc_time TO 'C';
ALTER DATABASE dlock_regress SET bytea_output TO 'hex';
ALTER DATABASE dlock_regress SET timezone_abbreviations TO 'Default';
SQL

status=0
"$pg_regress" \
  --use-existing \
  --bindir="$("$PG_CONFIG" --bindir)" \
  --host="$PGHOST" --port="$PGPORT" --user=postgres \
  --dbname=dlock_regress \
  --inputdir="$out/input" \
  --outputdir="$out" \
  "${tests[@]}" || status=$?

if [ "${REGRESS_ACCEPT:-0}" = 1 ]; then
  for t in "${tests[@]}"; do
    cp "$out/results/$t.out" "$root/sql/expected/$t.out"
  done
  echo "regress: copied ${#tests[@]} results to sql/expected/ — read every line before committing"
  exit 0
fi

if [ "$status" -ne 0 ]; then
  if [ -s "$out/regression.diffs" ]; then
    echo "---- $out/regression.diffs"
    cat "$out/regression.diffs"
  fi
  echo "regress: FAILED (pg_regress exit $status); results in $out" >&2
  exit 1
fi
echo "regress: ${#tests[@]} tests passed"
