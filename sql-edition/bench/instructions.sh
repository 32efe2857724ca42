#!/usr/bin/env bash
# Instructions per uncontended pair of the SQL edition (valgrind's callgrind, repeatable to the
# instruction where pairs/s on two noisy cores move by 15 %), beside the PL/pgSQL floor
# (floor.sql) and the hand-written lock table: a single-user backend runs 100, then 300 pairs
# of each on one key, again and again (a key row written over in place), as prepared
# statements; a pair costs the difference over 200. The edition is installed as on a managed
# service: by a non-superuser, on a cluster without the dlock library. random() is seeded, so
# the grants that sweep a page (one in eight) are the same ones in every run.
# A benchmark, not a test: it asserts nothing. Run by make bench-sql-edition.
source "$(dirname "${BASH_SOURCE[0]}")/../tests/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
small=100
large=300
if ! command -v valgrind >/dev/null; then
  echo "sql-edition instructions: installing valgrind"
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq valgrind >/dev/null
fi

SQLED_DIR=$BUILD/sql-edition/bench-instructions
work=$(mktemp -d)
if [ "$(id -u)" = 0 ]; then chown postgres: "$work"; fi
trap 'sqled_destroy; rm -rf "$work"' EXIT
bash "$CLUSTER_SH" destroy "$SQLED_DIR"
eval "$(bash "$CLUSTER_SH" start "$SQLED_DIR")"
export PGHOST PGPORT
file=$(OUT=$BUILD/sql-edition bash "$SQLED/build.sh" | tail -n 1)
psql -X -q -v ON_ERROR_STOP=1 -U postgres -d postgres -c "CREATE ROLE app_owner LOGIN CREATEROLE" \
  -c "CREATE DATABASE sqled OWNER app_owner" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -U app_owner -d sqled -c "SET search_path = public" -f "$file" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -U postgres -d sqled -f "$here/floor.sql" \
  -c "CREATE TABLE hand_lock (key text PRIMARY KEY, owner text NOT NULL, expires_at timestamptz NOT NULL)" >/dev/null
bash "$CLUSTER_SH" stop "$SQLED_DIR" fast
data="$(readlink -f "$SQLED_DIR")/data"
bin=$("$PG_CONFIG" --bindir)

workload() {
  local name=$1 n=$2 i
  echo "SELECT setseed(0.42);"
  case "$name" in
    sql | floor)
      local fn=dlock; [ "$name" = floor ] && fn=floor
      echo "PREPARE a(text) AS SELECT ${fn}_acquire(\$1, 'o', '30 seconds');"
      echo "PREPARE r(text) AS SELECT ${fn}_release(\$1, 'o');" ;;
    hand)
      echo "PREPARE a(text) AS INSERT INTO hand_lock AS l (key, owner, expires_at) VALUES (\$1, 'o', now() + interval '30 seconds') ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at WHERE l.expires_at < now();"
      echo "PREPARE r(text) AS DELETE FROM hand_lock WHERE key = \$1 AND owner = 'o';" ;;
  esac
  for ((i = 0; i < n; i++)); do echo "EXECUTE a('p1');"; echo "EXECUTE r('p1');"; done
}

echo "== instructions per pair, one key again and again (callgrind, $("$PG_CONFIG" --version))"
for name in hand floor sql; do
  for n in $small $large; do
    workload "$name" "$n" >"$work/$name-$n.sql"
    as_owner valgrind --tool=callgrind --callgrind-out-file="$work/$name-$n.cg" --log-file="$work/$name-$n.log" \
      "$bin/postgres" --single -D "$data" sqled <"$work/$name-$n.sql" >"$work/$name-$n.out" 2>&1
    if grep -q ERROR "$work/$name-$n.out"; then
      grep -m3 ERROR "$work/$name-$n.out" >&2
      fail "$name failed"
    fi
  done
  a=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$work/$name-$small.log")
  b=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$work/$name-$large.log")
  per=$(((b - a) / (large - small)))
  [ "$name" = hand ] && hand=$per
  awk -v n="$name" -v p="$per" -v h="$hand" 'BEGIN {
    label["hand"] = "hand-written lock table"; label["floor"] = "PL/pgSQL floor"; label["sql"] = "SQL edition"
    printf "%-24s %8.0f  (%.2fx the table)\n", label[n], p, p / h }'
done
