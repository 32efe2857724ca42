#!/usr/bin/env bash
# Idempotent machine setup: Debian packages, the pinned cargo-pgrx, and `cargo pgrx init`.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PGRX_VERSION=${PGRX_VERSION:-$(sed -n 's/^pgrx = "=\(.*\)"/\1/p' "$(dirname "$0")/../extension/Cargo.toml")}

need=()
# pgbouncer and python3-psycopg: the fault suite (a pooler in transaction mode; a second
# language); fonts-dejavu-core: the text of make bench's plots; etcd-server: a peer of make bench.
for pkg in postgresql-15 postgresql-server-dev-15 libclang-dev clang sudo python3 python3-psycopg redis-server \
  fonts-dejavu-core etcd-server \
  pgbouncer; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ "$(cargo pgrx --version 2>/dev/null | awk '{print $2}')" != "$PGRX_VERSION" ]; then
  echo "setup: installing cargo-pgrx $PGRX_VERSION"
  cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
fi

pgrx_home=${PGRX_HOME:-$HOME/.pgrx}
if ! grep -qs "pg15 = \"$PG_CONFIG\"" "$pgrx_home/config.toml"; then
  echo "setup: cargo pgrx init --pg15 $PG_CONFIG"
  cargo pgrx init --pg15 "$PG_CONFIG" >/dev/null
fi
