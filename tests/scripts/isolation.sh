#!/usr/bin/env bash
# `make test-isolation`: isolation specs (tests/isolation/specs/*.spec) run by
# PostgreSQL's pg_isolation_regress against a fresh cluster; outputs must equal
# tests/isolation/expected/*.out.
#
#   ISOLATION_ACCEPT=1 bash tests/scripts/isolation.sh   copy the results over the expected files (then READ them)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

root=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$root/build}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
runner="$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/isolation/pg_isolation_regress"
cluster="$BUILD/isolation-cluster"
cluster_sh="$root/tests/scripts/cluster.sh"
out="$BUILD/isolation"

stop_cluster() { bash "$cluster_sh" stop "$cluster" fast; }
bash "$cluster_sh" destroy "$cluster"
trap stop_cluster EXIT
cluster_env=$(bash "$cluster_sh" start "$cluster")
eval "$cluster_env"

specs=()
for file in "$root"/tests/isolation/specs/*.spec; do specs+=("$(basename "$file" .spec)"); done
rm -rf "$out"
mkdir -p "$out"
[ "$(id -u)" = 0 ] && chown postgres: "$out"
createdb -h "$PGHOST" -p "$PGPORT" -U postgres dlock_isolation
status=0
"$runner" --use-existing --host="$PGHOST" --port="$PGPORT" --user=postgres --dbname=dlock_isolation \
  --inputdir="$root/tests/isolation" --outputdir="$out" "${specs[@]}" || status=$?
if [ "${ISOLATION_ACCEPT:-0}" = 1 ]; then
  cp "$out"/results/*.out "$root/tests/isolation/expected/"
  echo "isolation: copied ${#specs[@]} results to tests/isolation/expected/ — read every line"
  exit 0
fi
if [ "$status" != 0 ]; then
  [ -f "$out/regression.diffs" ] && cat "$out/regression.diffs"
  echo "isolation: FAILED" >&2
  exit 1
fi
echo "isolation: ${#specs[@]} specs passed"
