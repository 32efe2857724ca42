#!/usr/bin/env bash
# `make test-regress`: the pg_regress expected-output tests of the SQL contract:
# every tests/regress/sql/NN_name.sql runs in order against a fresh cluster in
# $BUILD/regress-cluster, and its output must equal tests/regress/expected/NN_name.out
# (the layout pg_regress itself reads). Results and regression.diffs land in $BUILD/regress.
#
#   REGRESS_ACCEPT=1 bash tests/scripts/regress.sh   copy the results over expected/ (then READ them)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

root=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$root/build}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
pg_regress="$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress"
cluster="$BUILD/regress-cluster"
cluster_sh="$root/tests/scripts/cluster.sh"
out="$BUILD/regress"
suite="$root/tests/regress"

stop_cluster() { bash "$cluster_sh" stop "$cluster" fast; }


tests=()
for file in "$suite"/sql/*.sql; do
  tests+=("$(basename "$file" .sql)")
done
if [ ${#tests[@]} -eq 0 ]; then
  echo "regress: no tests in $suite/sql" >&2
  exit 2
fi

bash "$cluster_sh" destroy "$cluster"
trap stop_cluster EXIT
# The server must not inherit RUST_BACKTRACE: pgrx would append a Rust backtrace to the
# DETAIL of errors that cross its FFI guard (a cancelled wait's 57014, for one).
cluster_env=$(env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE bash "$cluster_sh" start "$cluster")
eval "$cluster_env"

rm -rf "$out"
mkdir -p "$out" "$suite/expected"
for t in "${tests[@]}"; do
  [ -f "$suite/expected/$t.out" ] && continue
  if [ "${REGRESS_ACCEPT:-0}" = 1 ]; then
    : >"$suite/expected/$t.out" # pg_regress stops at a missing expected file
  else
    echo "regress: expected/$t.out is missing (REGRESS_ACCEPT=1 creates it from the results)" >&2
    exit 2
  fi
done

regress_database

status=0
"$pg_regress" \
  --use-existing \
  --bindir="$("$PG_CONFIG" --bindir)" \
  --host="$PGHOST" --port="$PGPORT" --user=postgres \
  --dbname=dlock_regress \
  --inputdir="$suite" \
  --outputdir="$out" \
  "${tests[@]}" || status=$?

if [ "${REGRESS_ACCEPT:-0}" = 1 ]; then
  for t in "${tests[@]}"; do
    cp "$out/results/$t.out" "$suite/expected/$t.out"
  done
  echo "regress: copied ${#tests[@]} results to $suite/expected/ — read every line before committing"
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
