# The hostile-schema net (tests/fixtures/hostile/generate.sql), for clusters that
# tests/scripts/cluster.sh starts with DLOCK_HOSTILE=1 in the environment: sourced by it.
#
#   hostile_plant DIR PORT DB  traps into database DB (its search_path is left alone)
#   hostile_install DIR PORT   traps into template1 (then `postgres` again as a copy of it), and
#                              the traps' schema first on the search_path of every role and
#                              database (sessions add it through PGOPTIONS)
#   hostile_collect DIR        appends the traps the cluster's server log says sprang to
#                              $BUILD/hostile/sprung.log (make test-hostile fails on any)
HOSTILE_SEARCH_PATH='public, pg_catalog'

hostile_root() {
  echo "${BUILD:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/build}/hostile"
}

# The traps' DDL for this PostgreSQL, generated once per major version and generator text.
hostile_ddl() {
  local dir=$1 port=$2 root generator major sum out
  root=$(hostile_root)
  generator="$(dirname "${BASH_SOURCE[0]}")/../fixtures/hostile/generate.sql"
  major=$("$PG_BIN/postgres" --version | sed -n 's/.* \([0-9]*\)\..*/\1/p')
  sum=$(sha256sum "$generator" | cut -c1-12)
  out="$root/traps-pg$major-$sum.sql"
  if [ ! -s "$out" ]; then
    mkdir -p "$root"
    "$PG_BIN/psql" -X -q -h "$dir" -p "$port" -U postgres -d template1 -f "$generator" -o "$out.tmp" >&2
    mv "$out.tmp" "$out"
  fi
  echo "$out"
}

hostile_plant() {
  local dir=$1 port=$2 db=$3 ddl
  ddl=$(hostile_ddl "$dir" "$port")
  PGOPTIONS= "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d "$db" -f "$ddl" 2>&1 \
    | { grep -v 'already exists, skipping' || true; } >&2
}

hostile_install() {
  local dir=$1 port=$2
  local psql=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres)
  hostile_plant "$dir" "$port" template1
  PGOPTIONS= "${psql[@]}" -d template1 \
    -c "DROP DATABASE postgres" -c "CREATE DATABASE postgres" \
    -c "ALTER ROLE ALL SET search_path TO $HOSTILE_SEARCH_PATH" \
    -c "ALTER DATABASE template1 SET search_path TO $HOSTILE_SEARCH_PATH" \
    -c "ALTER DATABASE postgres SET search_path TO $HOSTILE_SEARCH_PATH" >&2
  mkdir -p "$(hostile_root)"
  echo "$dir" >>"$(hostile_root)/clusters.log"
}

hostile_collect() {
  local dir=$1 root
  root=$(hostile_root)
  [ -f "$dir/server.log" ] || return 0
  if grep -q "WARNING:  dlock-trap sprung" "$dir/server.log"; then
    mkdir -p "$root"
    grep -A3 "WARNING:  dlock-trap sprung" "$dir/server.log" | sed "s|^|$(basename "$dir"): |" >>"$root/sprung.log"
  fi
}
