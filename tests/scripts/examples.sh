#!/usr/bin/env bash
# The examples of docs/examples, run against the real extension: the Python ones (psycopg 3,
# Debian's python3-psycopg) and the Node ones (pg from npm, installed into build/ from the
# committed package-lock.json). A throwaway cluster with dlock preloaded, installed in schema
# dlock as the examples expect. Fails with the failing example's output on stderr.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$root/build}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
export PG_BIN=$("$PG_CONFIG" --bindir)
cluster_sh="$root/tests/scripts/cluster.sh"
cluster="$BUILD/examples-cluster"
node_dir="$BUILD/examples-node"

python=/usr/bin/python3 # Debian's, with python3-psycopg (a python3 earlier on PATH may lack it)
"$python" -c 'import psycopg' 2>/dev/null || {
  echo "examples: $python has no psycopg; run make setup (it installs python3-psycopg)" >&2
  exit 1
}
command -v node >/dev/null && command -v npm >/dev/null || {
  echo "examples: node and npm are missing; run make setup (it installs nodejs and npm)" >&2
  exit 1
}
# The Node examples' dependencies, as locked, outside the source tree.
mkdir -p "$node_dir"
cp "$root/docs/examples/node/package.json" "$root/docs/examples/node/package-lock.json" "$root"/docs/examples/node/*.js "$node_dir/"
if ! cmp -s "$root/docs/examples/node/package-lock.json" "$node_dir/node_modules/.package-lock.json.installed" 2>/dev/null; then
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error 2>&1 | grep -v 'Unknown user config' || true)
  cp "$root/docs/examples/node/package-lock.json" "$node_dir/node_modules/.package-lock.json.installed"
fi

bash "$cluster_sh" destroy "$cluster" >/dev/null 2>&1 || true
trap 'bash "$cluster_sh" stop "$cluster" fast >/dev/null 2>&1 || true' EXIT
eval "$(env -u RUST_BACKTRACE bash "$cluster_sh" start "$cluster" "shared_preload_libraries = 'dlock'")"
"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE SCHEMA dlock" -c "CREATE EXTENSION dlock SCHEMA dlock"

status=0
run() {
  local what=$1
  shift
  if ! out=$("$@" 2>&1); then
    echo "examples: $what failed:" >&2
    echo "$out" >&2
    status=1
  else
    echo "$out"
  fi
}
run "python/semaphore_pool.py" "$python" "$root/docs/examples/python/semaphore_pool.py"
run "python/leader.py" "$python" "$root/docs/examples/python/leader.py"
run "node/semaphore_pool.js" node "$node_dir/semaphore_pool.js"
run "node/leader.js" node "$node_dir/leader.js"
exit "$status"
