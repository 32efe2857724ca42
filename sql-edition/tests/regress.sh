#!/usr/bin/env bash
# The native edition's pg_regress suite (tests/regress) against the SQL-only edition.
#
# The suite is copied to $OUT/suite; every file in sql-edition/differences/*.patch (the one
# place where differences are declared, each hunk explained in its header) is applied to the
# copy; then pg_regress runs it against a fresh cluster where a non-superuser database owner
# installed the edition's one file. Any output that differs from the patched expected files
# fails: an undeclared difference is a failure. A patch that no longer applies fails too.
#
#   PG_CONFIG=...   the PostgreSQL to test (default 15)
#   DLOCK_HOSTILE=1 under the hostile-schema net (tests/fixtures/hostile): the cluster's traps
#                   in schema public, first on every search_path; the install and the update are armed
#   SQLED_ACCEPT=1  write the current differences to $OUT/differences.diff (to READ, then
#                   declare what is legitimate), instead of failing
source "$(dirname "${BASH_SOURCE[0]}")/../../tests/scripts/common.sh"

here=$(cd "$(dirname "$0")/.." && pwd)
root=$(cd "$here/.." && pwd)
BUILD=${BUILD:-$root/build}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
export PG_CONFIG
major=$("$PG_CONFIG" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
OUT=$BUILD/sql-edition/regress-pg$major${DLOCK_HOSTILE:+-hostile}
cluster=$BUILD/sql-edition/regress-cluster-pg$major${DLOCK_HOSTILE:+-hostile}
pg_regress="$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress"
cluster_sh="$root/tests/scripts/cluster.sh"

file=$(OUT=$BUILD/sql-edition bash "$here/build.sh" | tail -n 1)

rm -rf "$OUT"
mkdir -p "$OUT/suite"
cp -r "$root/tests/regress/sql" "$root/tests/regress/expected" "$OUT/suite/"
for p in "$here"/differences/*.patch; do
  [ -e "$p" ] || continue
  if ! patch -s -p1 -d "$OUT/suite" --no-backup-if-mismatch -r - <"$p"; then
    echo "sql-edition regress: declared difference $(basename "$p") no longer applies" >&2
    exit 1
  fi
done

bash "$cluster_sh" destroy "$cluster"
stop_cluster() { bash "$cluster_sh" stop "$cluster" fast; }
trap stop_cluster EXIT
eval "$(bash "$cluster_sh" start "$cluster")"

# The installer has what a managed service gives the database's owner: not a superuser,
# CREATEROLE, owner of the database (and so of its schema public).
psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE ROLE dlock_installer LOGIN CREATEROLE"
regress_database dlock_installer
# Installed into schema public, as the native suite creates the extension there; under the
# net the traps are there too, armed for the install, and searched before pg_catalog (which a
# search_path that does not name it searches first, where it hides every trap of its exact types).
armed=
[ "${DLOCK_HOSTILE:-}" = 1 ] && armed="SET dlock_trap.armed = on"
psql -X -q -v ON_ERROR_STOP=1 -d dlock_regress -U dlock_installer \
  -c "SET search_path = public${armed:+, pg_catalog}" ${armed:+-c "$armed"} -f "$file" >"$OUT/install.log" 2>&1 || {
  cat "$OUT/install.log" >&2
  echo "sql-edition regress: the install failed" >&2
  exit 1
}
if grep -q "dlock-trap sprung" "$OUT/install.log"; then
  cat "$OUT/install.log" >&2
  echo "sql-edition regress: a hostile-schema trap sprang during the install" >&2
  exit 1
fi

tests=()
for f in "$OUT"/suite/sql/*.sql; do tests+=("$(basename "$f" .sql)"); done
status=0
"$pg_regress" --use-existing --bindir="$("$PG_CONFIG" --bindir)" \
  --host="$PGHOST" --port="$PGPORT" --user=postgres --dbname=dlock_regress \
  --inputdir="$OUT/suite" --outputdir="$OUT" "${tests[@]}" >"$OUT/pg_regress.log" 2>&1 || status=$?
cat "$OUT/pg_regress.log"
if [ "${DLOCK_HOSTILE:-}" = 1 ]; then
  # What the install bound once and keeps (view rules, trigger WHEN clauses, defaults,
  # constraints) refers to no object of the schema the traps live in.
  bound=$(psql -X -q -At -d dlock_regress -U postgres -c "
    SELECT coalesce(string_agg(pg_describe_object(d.classid, d.objid, 0) || ' -> ' || pg_describe_object(d.refclassid, d.refobjid, 0), '; '), '')
      FROM pg_depend AS d
     WHERE d.classid IN ('pg_trigger'::regclass, 'pg_rewrite'::regclass, 'pg_attrdef'::regclass, 'pg_constraint'::regclass)
       AND CASE d.refclassid
             WHEN 'pg_operator'::regclass THEN (SELECT o.oprnamespace FROM pg_operator AS o WHERE o.oid = d.refobjid)
             WHEN 'pg_proc'::regclass THEN (SELECT p.pronamespace FROM pg_proc AS p WHERE p.oid = d.refobjid AND p.proname NOT LIKE 'dlock\_%')
             WHEN 'pg_type'::regclass THEN (SELECT t.typnamespace FROM pg_type AS t WHERE t.oid = d.refobjid)
           END = 'public'::regnamespace")
  [ -z "$bound" ] || { echo "sql-edition regress: the install bound objects of the traps' schema: $bound" >&2; exit 1; }
  # The one-file update (the code again), armed as the install was: nothing it runs may
  # resolve to the traps either, and what follows checks the code it put back.
  update=$(dirname "$file")/dlock-sql-update--0.3.0.sql
  psql -X -q -v ON_ERROR_STOP=1 -d dlock_regress -U dlock_installer \
    -c "SET search_path = public, pg_catalog" -c "SET dlock_trap.armed = on" -f "$update" >"$OUT/update.log" 2>&1 ||
    { cat "$OUT/update.log" >&2; echo "sql-edition regress: the update failed under the net" >&2; exit 1; }
  grep -q "dlock-trap sprung" "$OUT/update.log" &&
    { cat "$OUT/update.log" >&2; echo "sql-edition regress: a hostile-schema trap sprang during the update" >&2; exit 1; }
  # Every public function once more with the net armed (a trap anywhere in it springs).
  # As a superuser, and as a plain role (the functions then switch to their owner, whose
  # search_path they pin all the same).
  psql -X -q -d dlock_regress -U postgres -c "CREATE ROLE dlock_armed_plain LOGIN" >/dev/null
  for role in postgres dlock_armed_plain; do
    psql -X -q -d dlock_regress -U "$role" -f "$here/tests/armed.sql" >"$OUT/armed-$role.log" 2>&1
    grep -q "dlock-trap sprung" "$OUT/armed-$role.log" &&
      { cat "$OUT/armed-$role.log" >&2; echo "sql-edition regress: a trap sprang (as $role)" >&2; exit 1; }
    grep -q "session advisory locks left: 0" "$OUT/armed-$role.log" ||
      { cat "$OUT/armed-$role.log" >&2; echo "sql-edition regress: the armed calls left advisory locks behind (as $role)" >&2; exit 1; }
  done
  # The paths that run only while a sweep holds a key (after_sweep, the wait's last try): a
  # superuser's armed dlock_sweep() sweeps the free row of a key and keeps its transaction open
  # for a moment, and meanwhile an armed plain role takes the key each way that can find it
  # so. Each must wait for the sweep's commit and then take the key (a fence, not NULL).
  key_lock=$(psql -X -q -At -d dlock_regress -U postgres -c "SELECT dlock_internal.key_lock('armed:swept')")
  for probe in "dlock_acquire('armed:swept', 'p', '1 minute')" \
               "dlock_acquire('armed:swept', 'p', '1 minute', '30 milliseconds')" \
               "(dlock_try_acquire('armed:swept', 'p', '1 minute')).fence" \
               "dlock_acquire_all(ARRAY['armed:swept'], 'p', '1 minute')"; do
    psql -X -q -At -v ON_ERROR_STOP=1 -d dlock_regress -U dlock_armed_plain \
      -c "SELECT dlock_acquire('armed:swept', 'p', '1 minute')" -c "SELECT dlock_release('armed:swept', 'p')" >/dev/null
    psql -X -q -At -d dlock_regress -U postgres -c "SET dlock.sweep_after = 0" -c "SET dlock_trap.armed = on" \
      -c "BEGIN" -c "SELECT dlock_sweep()" -c "SELECT pg_sleep(0.5)" -c "COMMIT" >"$OUT/swept-sweep.log" 2>&1 &
    sweep=$!
    held=
    for _ in $(seq 100); do
      held=$(psql -X -q -At -d dlock_regress -U postgres -c "SELECT count(*) FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()
          AND ((classid::int8 << 32) | objid::int8) = $key_lock")
      [ "$held" = 1 ] && break
      sleep 0.02
    done
    [ "$held" = 1 ] || { echo "sql-edition regress: the armed sweep never held the key (before $probe)" >&2; exit 1; }
    fence=$(psql -X -q -At -d dlock_regress -U dlock_armed_plain -c "SET dlock_trap.armed = on" \
      -c "SELECT $probe" 2>&1)
    wait "$sweep"
    cat "$OUT/swept-sweep.log" >>"$OUT/armed-swept.log"
    echo "$probe: $fence" >>"$OUT/armed-swept.log"
    grep -q "dlock-trap sprung" "$OUT/swept-sweep.log" - <<<"$fence" &&
      { cat "$OUT/armed-swept.log" >&2; echo "sql-edition regress: a trap sprang while a sweep held a key" >&2; exit 1; }
    [[ "$fence" =~ ^\{?[0-9]+\}?$ ]] ||
      { cat "$OUT/armed-swept.log" >&2; echo "sql-edition regress: $probe answered '$fence' while a sweep held the key, not a fence" >&2; exit 1; }
    psql -X -q -At -d dlock_regress -U dlock_armed_plain -c "SELECT dlock_release_all('p')" >/dev/null
  done
  # The net is live: the same armed session trips a trap with an operator of its own.
  psql -X -q -d dlock_regress -U postgres -c "SET dlock_trap.armed = on" -c "SELECT 'a'::text = 'b'::text" >"$OUT/net-live.log" 2>&1
  grep -q "dlock-trap sprung" "$OUT/net-live.log" || { cat "$OUT/net-live.log" >&2; echo "sql-edition regress: the hostile-schema net did not spring on a control" >&2; exit 1; }
fi
stop_cluster
trap - EXIT
if grep "dlock-trap sprung" "$(readlink -f "$cluster")/server.log" | grep -vq "operator =(text, text)"; then
  grep -A3 "dlock-trap sprung" "$(readlink -f "$cluster")/server.log" >&2
  echo "sql-edition regress: a hostile-schema trap ran inside the edition's statements" >&2
  exit 1
fi
if [ "$status" -ne 0 ]; then
  if [ "${SQLED_ACCEPT:-0}" = 1 ]; then
    cp "$OUT/regression.diffs" "$OUT/differences.diff"
    echo "sql-edition regress: differences in $OUT/differences.diff (declare only what is legitimate)"
    exit 0
  fi
  [ -s "$OUT/regression.diffs" ] && cat "$OUT/regression.diffs"
  echo "sql-edition regress: FAILED on PostgreSQL $major: an undeclared difference (results in $OUT)" >&2
  exit 1
fi
echo "sql-edition regress: ${#tests[@]} tests passed on PostgreSQL $major, with the differences declared in sql-edition/differences"
