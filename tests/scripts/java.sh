#!/usr/bin/env bash
# The Java client (clients/java) and its conformance runner (conformance/runners/java).
#
#   java.sh build   the jar into $BUILD/clients/ (its path is the last line printed)
#   java.sh test    build, then on a throwaway cluster (dlock preloaded, in schema dlock) and a
#                   pgbouncer in transaction mode in front of it: the client's JUnit suite, then
#                   the conformance suite with the Java runner in --strict mode
#   java.sh conformance ARGS   the conformance runner alone against $DLOCK_CONFORMANCE_DSN (the
#                   SQL edition's tests run it so)
#   java.sh bench   each acquire+release through the client against the same SQL through raw
#                   JDBC (8 threads, interleaved rounds, medians), on a throwaway cluster
#
# Offline by design: javac and jar, with the driver, HikariCP, JUnit 5 and Gson from Debian's
# packages (installed here when missing), no Maven repository. Everything built goes under
# $BUILD/clients/java/, the jar into $BUILD/clients/.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

root=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$root/build}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
export PG_BIN=$("$PG_CONFIG" --bindir)
out="$BUILD/clients"
work="$out/java"
src="$root/clients/java"
runner_src="$root/conformance/runners/java"
cluster_sh="$root/tests/scripts/cluster.sh"
cluster="$work/cluster"
share=/usr/share/java
mode=${1:-build}

say() { echo "java: $*" >&2; }

# The version, from the one place it is written: the POM's own <version>.
version=$(sed -n '/<artifactId>dlock-client<\/artifactId>/{n;s/.*<version>\(.*\)<\/version>.*/\1/p;q}' "$src/pom.xml")
jar="$out/dlock-client-$version.jar"

# Debian's packages of what the build and the tests use, installed when missing.
packages() {
  local missing=()
  command -v javac >/dev/null || missing+=(default-jdk-headless)
  [ -f "$share/postgresql.jar" ] || missing+=(libpostgresql-jdbc-java)
  [ -f "$share/HikariCP.jar" ] || missing+=(libhikaricp-java)
  [ -f "$share/junit-platform-console-standalone.jar" ] || missing+=(junit5)
  [ -f "$share/gson.jar" ] || missing+=(libgoogle-gson-java)
  [ -f "$share/slf4j-nop.jar" ] || missing+=(libslf4j-java)
  command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
  [ ${#missing[@]} = 0 ] && return 0
  say "installing ${missing[*]}"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2; then
    apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
  fi
}

# The library jar (and its POM inside, for install-file); its path on stdout.
build() {
  packages
  mkdir -p "$out"
  rm -rf "$work/classes"
  mkdir -p "$work/classes/META-INF/maven/dev.dlock/dlock-client"
  javac --release 17 -encoding UTF-8 -Xlint:all -Xdoclint:all/protected -Werror \
    -cp "$share/postgresql.jar" -d "$work/classes" $(find "$src/src/main/java" -name '*.java') >&2
  cp "$src/pom.xml" "$work/classes/META-INF/maven/dev.dlock/dlock-client/pom.xml"
  printf 'groupId=dev.dlock\nartifactId=dlock-client\nversion=%s\n' "$version" \
    >"$work/classes/META-INF/maven/dev.dlock/dlock-client/pom.properties"
  printf 'Automatic-Module-Name: dev.dlock.client\nImplementation-Title: dlock-client\nImplementation-Version: %s\n' \
    "$version" >"$work/manifest.txt"
  rm -f "$out"/dlock-client-*.jar
  jar --create --file "$jar" --manifest "$work/manifest.txt" -C "$work/classes" . >&2
  echo "$jar"
}

# What the tests, the runner and the bench run with, beside the jar.
libs="$share/postgresql.jar:$share/HikariCP.jar:$share/slf4j-api.jar:$share/slf4j-nop.jar"

build_tests() {
  rm -rf "$work/test-classes" "$work/runner-classes" "$work/bench-classes"
  mkdir -p "$work/test-classes" "$work/runner-classes" "$work/bench-classes"
  # The tests are in the library's package (white-box views of its waits): compiled against its
  # classes; run against the jar.
  javac --release 17 -encoding UTF-8 -Xlint:all -Werror -cp "$jar:$libs:$share/junit-platform-console-standalone.jar" \
    -d "$work/test-classes" $(find "$src/src/test/java" -name '*.java') >&2
  javac --release 17 -encoding UTF-8 -Xlint:all -Werror -cp "$jar:$libs:$share/gson.jar" \
    -d "$work/runner-classes" "$runner_src"/*.java >&2
  javac --release 17 -encoding UTF-8 -Xlint:all -Werror -cp "$jar:$libs" \
    -d "$work/bench-classes" $(find "$src/src/bench/java" -name '*.java') >&2
}

# A fresh cluster with dlock preloaded and installed in schema dlock; sets PGPORT.
start_cluster() {
  local library tries started
  # While the extension is being reinstalled its library is briefly missing (and new sessions
  # fail with 58P01): wait for it rather than fail.
  library="$("$PG_CONFIG" --pkglibdir)/dlock.so"
  for tries in $(seq 1 60); do
    [ -f "$library" ] && break
    [ "$tries" = 1 ] && say "waiting for $library (being reinstalled?)"
    sleep 5
  done
  for tries in 1 2 3; do
    bash "$cluster_sh" destroy "$cluster" >/dev/null 2>&1 || true
    if started=$(env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE bash "$cluster_sh" start "$cluster" "shared_preload_libraries = 'dlock'") &&
      eval "$started" &&
      "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres \
        -c "CREATE SCHEMA IF NOT EXISTS dlock" -c "CREATE EXTENSION IF NOT EXISTS dlock SCHEMA dlock" >&2; then
      return 0
    fi
    say "the cluster did not come up (try $tries); again in 10 s"
    sleep 10
  done
  return 1
}

# pgbouncer in transaction mode with 4 server connections in front of the cluster (as
# tests/scripts/clients.sh starts it); sets PGBOUNCER_PORT.
start_pgbouncer() {
  local dir="$work/pgbouncer"
  rm -rf "$dir"
  mkdir -p "$dir"
  PGBOUNCER_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  echo '"postgres" ""' >"$dir/userlist.txt"
  {
    echo "[databases]"
    echo "postgres = host=127.0.0.1 port=$PGPORT dbname=postgres"
    echo "[pgbouncer]"
    echo "listen_addr = 127.0.0.1"
    echo "listen_port = $PGBOUNCER_PORT"
    echo "unix_socket_dir ="
    echo "auth_type = trust"
    echo "auth_file = $dir/userlist.txt"
    echo "pool_mode = transaction"
    echo "default_pool_size = 4"
    echo "min_pool_size = 0"
    echo "reserve_pool_size = 0"
    echo "max_client_conn = 400"
    # pgjdbc sends extra_float_digits at startup, which pgbouncer would otherwise refuse.
    echo "ignore_startup_parameters = extra_float_digits"
    if [ "$(id -u)" = 0 ]; then echo "user = postgres"; fi
  } >"$dir/pgbouncer.ini"
  chown -R postgres: "$dir" 2>/dev/null || true
  "${PGBOUNCER:-/usr/sbin/pgbouncer}" "$dir/pgbouncer.ini" >"$dir/pgbouncer.log" 2>&1 &
  PGBOUNCER_PID=$!
  for _ in $(seq 1 100); do
    if python3 -c "import socket; socket.create_connection(('127.0.0.1', $PGBOUNCER_PORT), 0.2)" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  cat "$dir/pgbouncer.log" >&2
  return 1
}

stop_all() {
  if [ -n "${PGBOUNCER_PID:-}" ]; then kill "$PGBOUNCER_PID" 2>/dev/null || true; wait "$PGBOUNCER_PID" 2>/dev/null || true; fi
  bash "$cluster_sh" destroy "$cluster" >/dev/null 2>&1 || true
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

run_tests() {
  build >/dev/null
  build_tests
  trap stop_all EXIT
  start_cluster
  start_pgbouncer
  export DLOCK_TEST_JDBC_URL="jdbc:postgresql://127.0.0.1:$PGPORT/postgres?user=postgres"
  export DLOCK_TEST_PGBOUNCER_JDBC_URL="jdbc:postgresql://127.0.0.1:$PGBOUNCER_PORT/postgres?user=postgres"
  export DLOCK_CONFORMANCE_DSN="postgresql://postgres@127.0.0.1:$PGPORT/postgres"
  export DLOCK_CONFORMANCE_PGBOUNCER_DSN="postgresql://postgres@127.0.0.1:$PGBOUNCER_PORT/postgres"
  export DLOCK_CONFORMANCE_SUITE="$root/conformance"
  # The lost-lease warnings are expected in these tests: only the client's errors are logged.
  printf 'handlers = java.util.logging.ConsoleHandler\ndev.dlock.client.level = SEVERE\n' >"$work/logging.properties"
  suite "java: JUnit (clients/java/src/test)" java -Djava.util.logging.config.file="$work/logging.properties" \
    -jar "$share/junit-platform-console-standalone.jar" \
    --disable-banner --details=summary --details-theme=ascii --fail-if-no-tests \
    --reports-dir "$work/test-reports" \
    -cp "$work/test-classes:$jar:$libs" --scan-classpath "$work/test-classes"
  suite "conformance: java" java -cp "$work/runner-classes:$jar:$libs:$share/gson.jar" \
    dev.dlock.conformance.Run --strict
  if [ "$status" = 0 ]; then say "all Java suites passed"; else say "some Java suites FAILED"; fi
}

run_bench() {
  build >/dev/null
  build_tests
  trap stop_all EXIT
  start_cluster
  java -cp "$work/bench-classes:$jar:$libs" dev.dlock.client.bench.Bench \
    --url "jdbc:postgresql://127.0.0.1:$PGPORT/postgres?user=postgres" "${@:2}"
}

# The conformance runner alone against the server $DLOCK_CONFORMANCE_DSN names (another
# edition's, say), with the arguments given ("--strict --only a,b").
run_conformance() {
  build >/dev/null
  build_tests
  export DLOCK_CONFORMANCE_SUITE="$root/conformance"
  suite "conformance: java" java -cp "$work/runner-classes:$jar:$libs:$share/gson.jar" \
    dev.dlock.conformance.Run "$@"
}

case "$mode" in
build) build ;;
test) run_tests ;;
bench) run_bench "$@" ;;
conformance) run_conformance "${@:2}" ;;
*)
  echo "usage: java.sh build|test|bench|conformance [runner arguments]" >&2
  exit 2
  ;;
esac
exit "$status"
