#!/usr/bin/env bash
# The Python and TypeScript clients (clients/python, clients/typescript) and their conformance
# runs (conformance/).
#
#   clients.sh build   the wheel and the npm tarball into $BUILD/clients/; their paths, one per line
#   clients.sh test    build, then on a throwaway cluster (dlock preloaded, in schema dlock) and a
#                      pgbouncer in transaction mode in front of it: mypy --strict, the Python
#                      client's pytest suite, the TypeScript client's node --test suite, the
#                      tarball installed into an empty project, and the conformance suite with
#                      every runner (Python blocking and asyncio, TypeScript) in --strict mode
#   clients.sh bench   each client's acquire+release against the same SQL through its raw driver
#                      (8 concurrent threads/tasks), on a throwaway cluster
#   clients.sh conformance ARGS   the conformance runners alone against $DLOCK_CONFORMANCE_DSN
#                      (the SQL edition's tests run them so)
#
# Everything installs into $BUILD/clients/ from PyPI and npm: the Python tools from
# clients/python/requirements-dev.txt into a venv, the Node packages from the committed
# clients/typescript/package-lock.json (npm ci). Never into the system's Python.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

root=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$root/build}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
export PG_BIN=$("$PG_CONFIG" --bindir)
out="$BUILD/clients"
venv="$out/venv"
ts_build="$out/typescript"
cluster_sh="$root/tests/scripts/cluster.sh"
cluster="$out/cluster"
mode=${1:-build}

say() { echo "clients: $*" >&2; }
# Nothing written into the source tree (bytecode, caches): build/ is the place.
export PYTHONDONTWRITEBYTECODE=1

# The venv, with what requirements-dev.txt lists (again only when it changed).
python_tools() {
  local python=${PYTHON:-python3}
  if [ ! -x "$venv/bin/python" ]; then
    say "creating $venv"
    "$python" -m venv "$venv"
  fi
  if ! cmp -s "$root/clients/python/requirements-dev.txt" "$venv/.requirements-dev.txt" 2>/dev/null; then
    say "installing the Python tools (requirements-dev.txt)"
    "$venv/bin/python" -m pip install -q --upgrade pip >&2
    "$venv/bin/python" -m pip install -q -r "$root/clients/python/requirements-dev.txt" >&2
    cp "$root/clients/python/requirements-dev.txt" "$venv/.requirements-dev.txt"
  fi
}

build_python() {
  python_tools
  rm -f "$out"/dlock_client-*.whl
  # The ecosystem's own tool, in an isolated environment with the build backend from PyPI.
  "$venv/bin/python" -m build --wheel --outdir "$out" "$root/clients/python" >"$out/build-python.log" 2>&1 || {
    cat "$out/build-python.log" >&2
    return 1
  }
  ls "$out"/dlock_client-*.whl
}

build_typescript() {
  command -v npm >/dev/null || { say "node and npm are missing (make setup installs them)"; return 1; }
  mkdir -p "$ts_build"
  # The sources beside the locked dependencies, outside the tree.
  rm -rf "$ts_build/src" "$ts_build/test" "$ts_build/dist"
  cp -r "$root/clients/typescript/src" "$root/clients/typescript/test" "$ts_build/"
  cp "$root/clients/typescript/"{package.json,package-lock.json,tsconfig.json,README.md,bench.mjs} "$ts_build/"
  if ! cmp -s "$ts_build/package-lock.json" "$ts_build/node_modules/.package-lock.json.installed" 2>/dev/null; then
    say "installing the Node packages (package-lock.json)"
    (cd "$ts_build" && npm ci --no-audit --no-fund --loglevel=error >&2)
    cp "$ts_build/package-lock.json" "$ts_build/node_modules/.package-lock.json.installed"
  fi
  (cd "$ts_build" && npx --no-install tsc -p tsconfig.json >&2)
  rm -f "$out"/dlock-client-*.tgz
  (cd "$ts_build" && npm pack --silent --pack-destination "$out" >/dev/null)
  ls "$out"/dlock-client-*.tgz
}

build() {
  mkdir -p "$out"
  build_python
  build_typescript
}

# A fresh cluster with dlock preloaded and installed in schema dlock; sets DSN.
start_cluster() {
  bash "$cluster_sh" destroy "$cluster" >/dev/null 2>&1 || true
  eval "$(env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE bash "$cluster_sh" start "$cluster" "shared_preload_libraries = 'dlock'")"
  "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres \
    -c "CREATE SCHEMA dlock" -c "CREATE EXTENSION dlock SCHEMA dlock" >&2
  DSN="postgresql://postgres@127.0.0.1:$PGPORT/postgres"
}

# A pgbouncer in transaction mode with 4 server connections in front of the cluster (as
# tests/src/pgbouncer.rs starts it); sets PGBOUNCER_DSN.
start_pgbouncer() {
  local dir="$out/pgbouncer" port
  rm -rf "$dir"
  mkdir -p "$dir"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  echo '"postgres" ""' >"$dir/userlist.txt"
  {
    echo "[databases]"
    echo "postgres = host=127.0.0.1 port=$PGPORT dbname=postgres"
    echo "[pgbouncer]"
    echo "listen_addr = 127.0.0.1"
    echo "listen_port = $port"
    echo "unix_socket_dir ="
    echo "auth_type = trust"
    echo "auth_file = $dir/userlist.txt"
    echo "pool_mode = transaction"
    echo "default_pool_size = 4"
    echo "min_pool_size = 0"
    echo "reserve_pool_size = 0"
    echo "max_client_conn = 200"
    echo "ignore_startup_parameters = extra_float_digits"
    # pgbouncer refuses to run as root: started as root it switches to `postgres` itself.
    if [ "$(id -u)" = 0 ]; then echo "user = postgres"; fi
  } >"$dir/pgbouncer.ini"
  chown -R postgres: "$dir" 2>/dev/null || true
  "${PGBOUNCER:-/usr/sbin/pgbouncer}" "$dir/pgbouncer.ini" >"$dir/pgbouncer.log" 2>&1 &
  PGBOUNCER_PID=$!
  for _ in $(seq 1 100); do
    if python3 -c "import socket, sys; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null; then
      PGBOUNCER_DSN="postgresql://postgres@127.0.0.1:$port/postgres"
      return 0
    fi
    sleep 0.1
  done
  cat "$dir/pgbouncer.log" >&2
  return 1
}

stop_all() {
  if [ -n "${PGBOUNCER_PID:-}" ]; then kill "$PGBOUNCER_PID" 2>/dev/null || true; wait "$PGBOUNCER_PID" 2>/dev/null || true; fi
  bash "$cluster_sh" stop "$cluster" fast >/dev/null 2>&1 || true
}

status=0
# Runs one suite, recording a failure without stopping the others.
suite() {
  local what=$1
  shift
  say "== $what"
  local started=$SECONDS
  if "$@"; then
    say "== $what: passed ($((SECONDS - started)) s)"
  else
    say "== $what: FAILED"
    status=1
  fi
}

# The tarball in an empty project, with nothing but npm (the package must import there), and
# the TypeScript runner beside it: ts_consumer DIR TARBALL.
ts_consumer() {
  rm -rf "$1"
  mkdir -p "$1/runner"
  (cd "$1" && npm init -y >/dev/null && npm install --no-audit --no-fund --loglevel=error "$2" >&2 &&
    node --input-type=module -e "import('dlock-client').then((m) => { if (typeof m.Client !== 'function') process.exit(1); })") &&
    cp "$root"/conformance/runners/typescript/*.mjs "$1/runner/"
}

run_tests() {
  local built wheel tarball consumer="$out/ts-consumer"
  built=$(build)
  wheel=$(sed -n 1p <<<"$built")
  tarball=$(sed -n 2p <<<"$built")
  "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel" >&2
  trap stop_all EXIT
  start_cluster
  start_pgbouncer
  export DLOCK_TEST_DSN=$DSN DLOCK_TEST_PGBOUNCER_DSN=$PGBOUNCER_DSN
  export DLOCK_CONFORMANCE_DSN=$DSN DLOCK_CONFORMANCE_PGBOUNCER_DSN=$PGBOUNCER_DSN

  suite "python: mypy --strict" "$venv/bin/mypy" --strict --cache-dir "$out/mypy-cache" "$root/clients/python/src/dlock_client"
  # The installed wheel is what the tests import (the source tree is not on the path).
  suite "python: pytest" bash -c "cd '$root/clients/python' && '$venv/bin/python' -m pytest -q -p no:cacheprovider tests"
  suite "typescript: node --test" bash -c "cd '$ts_build' && node --test --test-concurrency=1 test/"
  suite "typescript: npm install of the tarball in an empty project" ts_consumer "$consumer" "$tarball"
  suite "conformance: python (blocking)" "$venv/bin/python" "$root/conformance/runners/python/run.py" --api sync --strict
  suite "conformance: python (asyncio)" "$venv/bin/python" "$root/conformance/runners/python/run.py" --api aio --strict
  suite "conformance: typescript" env DLOCK_CONFORMANCE_SUITE="$root/conformance" node "$consumer/runner/run.mjs" --strict
  if [ "$status" = 0 ]; then say "all client suites passed"; else say "some client suites FAILED"; fi
}

# The conformance runners alone (Python blocking and asyncio, TypeScript from the tarball in an
# empty project) against the server $DLOCK_CONFORMANCE_DSN names (another edition's, say), with
# the arguments given ("--strict --only a,b").
run_conformance() {
  local built wheel tarball consumer="$out/ts-consumer-conformance"
  built=$(build)
  wheel=$(sed -n 1p <<<"$built")
  tarball=$(sed -n 2p <<<"$built")
  "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel" >&2
  ts_consumer "$consumer" "$tarball"
  suite "conformance: python (blocking)" "$venv/bin/python" "$root/conformance/runners/python/run.py" --api sync "$@"
  suite "conformance: python (asyncio)" "$venv/bin/python" "$root/conformance/runners/python/run.py" --api aio "$@"
  suite "conformance: typescript" env DLOCK_CONFORMANCE_SUITE="$root/conformance" node "$consumer/runner/run.mjs" "$@"
  if [ "$status" = 0 ]; then say "all conformance runs passed"; else say "some conformance runs FAILED"; fi
}

run_bench() {
  build >/dev/null
  "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$out"/dlock_client-*.whl >&2
  trap stop_all EXIT
  start_cluster
  "$venv/bin/python" "$root/clients/python/bench.py" --dsn "$DSN"
  (cd "$ts_build" && node bench.mjs --dsn "$DSN")
}

case "$mode" in
build) build ;;
test) run_tests ;;
bench) run_bench ;;
conformance) run_conformance "${@:2}" ;;
*)
  echo "usage: clients.sh build|test|bench|conformance [runner arguments]" >&2
  exit 2
  ;;
esac
exit "$status"
