#!/usr/bin/env bash
# The extension's #[pg_test]s (and its plain unit tests) in a pgrx-managed cluster.
# initdb refuses root, so as root the cluster runs as `postgres`, in a directory it can reach.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-$PWD/build}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
runas=()
if [ "$(id -u)" = 0 ]; then
  pgdata=$BUILD/pgrx-test-data
  mkdir -p "$pgdata"
  if ! runuser -u postgres -- test -w "$pgdata" 2>/dev/null && ! { chown postgres: "$pgdata" && runuser -u postgres -- test -w "$pgdata"; }; then
    pgdata=$(mktemp -d /tmp/dlock-pgrx-test.XXXXXX)
  fi
  rm -rf "$pgdata"; mkdir -p "$pgdata"; chown postgres: "$pgdata"
  runas=(--runas postgres --pgdata "$pgdata")
fi
# cargo-pgrx copies dlock.so over the installed one in place; unlink it so running backends
# keep their code.
rm -f "$("$PG_CONFIG" --pkglibdir)/dlock.so"
cd extension
major=$("$PG_CONFIG" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
cargo pgrx test "pg$major" "${runas[@]}"
