#!/usr/bin/env bash
# `make bench-instructions`: what an uncontended acquire + release pair costs the server, in
# instructions counted by valgrind (callgrind): repeatable to the instruction whatever else the
# machine is doing, where pairs/s on two noisy cores vary by 10 %. A single-user backend (no
# client, no network) runs N, then M pairs of each workload as prepared statements; the cost of
# one pair is the difference divided by M - N, so start-up and catalog caching drop out. For
# dlock it also splits the pair into the two functions' own work (pgrx's error guard included),
# the sweep, and the rest.
#
#   [PG_CONFIG=...] bash bench/instructions.sh [OUT_DIR]
# Writes instructions.md into OUT_DIR (default $BUILD/bench/instructions-<timestamp>), and the
# callgrind profiles beside it (callgrind_annotate or kcachegrind reads them).
source "$(dirname "$0")/lib.sh"

out=${1:-$BUILD/bench/instructions-$stamp}
cluster="$BUILD/bench-instructions-cluster"
small=${BENCH_PAIRS_SMALL:-200}
large=${BENCH_PAIRS_LARGE:-600}
mkdir -p "$out"
report="$out/instructions.md"
if ! command -v valgrind >/dev/null || ! command -v callgrind_annotate >/dev/null; then
  echo "bench-instructions: installing valgrind"
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq valgrind >/dev/null
fi

work=$(mktemp -d)
# The backend writes its profiles here, as `postgres` when we are root.
if [ "$(id -u)" = 0 ]; then chown postgres: "$work"; fi
trap 'bash "$cluster_sh" destroy "$cluster" >/dev/null 2>&1; rm -rf "$work"' EXIT
bash "$cluster_sh" destroy "$cluster" >/dev/null 2>&1
# initdb and the settings of the other benchmarks (dlock preloaded), then stopped: the backend
# runs alone on the data directory.
env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE bash "$cluster_sh" start "$cluster" \
  "shared_preload_libraries = 'dlock'" "fsync = on" "synchronous_commit = on" >/dev/null
bash "$cluster_sh" stop "$cluster" fast >/dev/null
data="$(readlink -f "$cluster")/data"

# Runs the statements of file $1 in a single-user backend (under valgrind if $2 names an output).
single() {
  local sql=$1 profile=${2:-}
  if [ -n "$profile" ]; then
    as_owner env -u RUST_BACKTRACE valgrind --tool=callgrind --callgrind-out-file="$profile" \
      --log-file="$profile.log" "$pg_bin/postgres" --single -D "$data" postgres <"$sql" >"$profile.out" 2>&1
  else
    as_owner env -u RUST_BACKTRACE "$pg_bin/postgres" --single -D "$data" postgres <"$sql" >"$work/setup.out" 2>&1
  fi
}

cat >"$work/setup.sql" <<'SQL'
CREATE EXTENSION dlock;
CREATE TABLE ceiling (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0);
INSERT INTO ceiling SELECT g FROM generate_series(1, 1000) g;
CREATE TABLE hand_lock (key text PRIMARY KEY, owner text NOT NULL, expires_at timestamptz NOT NULL);
SQL
single "$work/setup.sql"
if grep -q "ERROR" "$work/setup.out"; then
  echo "bench-instructions: setting up failed:" >&2
  cat "$work/setup.out" >&2
  exit 1
fi

# The workloads of `make bench-targets`' pairs section, as prepared statements; every pair on a
# key of its own.
workload() {
  local name=$1 n=$2 file="$work/$1-$2.sql"
  case "$name" in
    bound)
      echo "PREPARE u(int) AS UPDATE ceiling SET v = v + 1 WHERE id = \$1;"
      echo "PREPARE s AS SELECT 1;"
      for ((i = 0; i < n; i++)); do echo "EXECUTE u($((i % 1000 + 1)));"; echo "EXECUTE s;"; done ;;
    hand)
      echo "PREPARE i(text, text) AS INSERT INTO hand_lock AS l (key, owner, expires_at) VALUES (\$1, \$2, now() + interval '30 seconds') ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at WHERE l.expires_at < now();"
      echo "PREPARE d(text, text) AS DELETE FROM hand_lock WHERE key = \$1 AND owner = \$2;"
      for ((i = 0; i < n; i++)); do echo "EXECUTE i('h$n:$i', 'o');"; echo "EXECUTE d('h$n:$i', 'o');"; done ;;
    floor)
      # The least any lease table does: a plain INSERT of the lease, then its DELETE committed
      # asynchronously (as dlock commits a release), no function, no check.
      echo "PREPARE i(text, text) AS INSERT INTO hand_lock (key, owner, expires_at) VALUES (\$1, \$2, now() + interval '30 seconds');"
      echo "PREPARE d(text, text) AS DELETE FROM hand_lock WHERE key = \$1 AND owner = \$2 AND set_config('synchronous_commit', 'off', true) IS NOT NULL;"
      for ((i = 0; i < n; i++)); do echo "EXECUTE i('f$n:$i', 'o');"; echo "EXECUTE d('f$n:$i', 'o');"; done ;;
    hand_reused)
      # The same two statements on one key, again and again (a lock of a job or a resource).
      echo "PREPARE i(text, text) AS INSERT INTO hand_lock AS l (key, owner, expires_at) VALUES (\$1, \$2, now() + interval '30 seconds') ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at WHERE l.expires_at < now();"
      echo "PREPARE d(text, text) AS DELETE FROM hand_lock WHERE key = \$1 AND owner = \$2;"
      for ((i = 0; i < n; i++)); do echo "EXECUTE i('h$n', 'o');"; echo "EXECUTE d('h$n', 'o');"; done ;;
    dlock_reused | untracked)
      # dlock's pair on one key, again and again: its row written over in place. untracked: the
      # same with its counters off, so that their cost is a difference of counts, not of two
      # noisy pairs/s.
      [ "$name" = untracked ] && echo "SET dlock.track_stats = off;"
      echo "PREPARE a(text, text) AS SELECT dlock_acquire(\$1, \$2, '30 seconds');"
      echo "PREPARE r(text, text) AS SELECT dlock_release(\$1, \$2);"
      for ((i = 0; i < n; i++)); do echo "EXECUTE a('p$n', 'o');"; echo "EXECUTE r('p$n', 'o');"; done ;;
    dlock)
      # A key per pair, in the steady state of a churn of keys: each row swept soon after its
      # release (dlock.sweep_after = 0 here; 5 s by default), so a pair pays for its insert, the
      # page its grant sweeps and, on average, one row's delete.
      echo "SET dlock.sweep_after = 0;"
      echo "PREPARE a(text, text) AS SELECT dlock_acquire(\$1, \$2, '30 seconds');"
      echo "PREPARE r(text, text) AS SELECT dlock_release(\$1, \$2);"
      for ((i = 0; i < n; i++)); do echo "EXECUTE a('p$n:$i', 'o');"; echo "EXECUTE r('p$n:$i', 'o');"; done ;;
  esac >"$file"
  echo "$file"
}

collected() { sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$1.log"; }
# Inclusive instructions of function $2 in profile $1 (0 if absent).
inclusive() {
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    awk -v f="$2" '{ gsub(",", "", $1) } !found && index($0, ":" f " [") { print $1; found = 1 } END { if (!found) print 0 }'
}
per_pair() { awk -v a="$1" -v b="$2" -v n=$((large - small)) 'BEGIN { printf "%.0f", (b - a) / n }'; }

declare -A cost
for name in bound floor hand hand_reused dlock_reused untracked dlock; do
  for n in "$small" "$large"; do
    single "$(workload "$name" "$n")" "$work/$name-$n.cg"
    if grep -q "ERROR" "$work/$name-$n.cg.out"; then
      echo "bench-instructions: $name failed:" >&2
      grep -m3 "ERROR" "$work/$name-$n.cg.out" >&2
      exit 1
    fi
  done
  cost[$name]=$(per_pair "$(collected "$work/$name-$small.cg")" "$(collected "$work/$name-$large.cg")")
  echo "bench: $name: ${cost[$name]} instructions per pair"
done

# Per pair inclusive cost of function $1 in workload ${2:-dlock_reused}.
part() { per_pair "$(inclusive "$work/${2:-dlock_reused}-$small.cg" "$1")" "$(inclusive "$work/${2:-dlock_reused}-$large.cg" "$1")"; }
# The counters' own work: counted when a call ends, added to shared memory at transaction end.
counting() { echo $(($(part dlock::stats::count_at_commit "$1") + $(part dlock::stats::at_end "$1"))); }
counters_on=$(counting dlock_reused)
counters_off=$(counting untracked)
# A single-user backend prints every result row and its descriptor to stdout: work a network
# client's protocol does differently, paid by the SELECTs (the bound's one, dlock's two) and not
# by plain INSERT and DELETE. Shown apart, so that the comparison can leave it out.
printing() { echo $(($(part debugtup "$1") + $(part debugStartup "$1"))); }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
k() { awk -v a="$1" 'BEGIN { printf "%.1fk", a / 1000 }'; }

{
  echo "# Instructions per uncontended pair"
  echo
  echo "$("$pg_bin/postgres" --version); dlock preloaded; a single-user backend under callgrind,"
  echo "prepared statements, a key per pair; per pair = (cost of $large pairs - cost of $small) / $((large - small))."
  echo "Where a dlock grant sweeps a random page of the lease table (after every insert; one grant in"
  echo "eight otherwise), what it finds there varies: dlock's figures move by a few thousand instructions"
  echo "from run to run, the others repeat to the instruction."
  echo
  echo "| workload | instructions per pair | / two-statement bound | of which printing result rows | without it, / the bound's |"
  echo "|---|---:|---:|---:|---:|"
  for name in bound floor hand hand_reused dlock dlock_reused; do
    case "$name" in
      bound) what="two-statement bound: UPDATE of a row, then SELECT 1" ;;
      floor) what="lease-table floor: plain INSERT, then DELETE committed asynchronously" ;;
      hand) what="hand-written lock table: INSERT … ON CONFLICT, then DELETE, a key per pair" ;;
      hand_reused) what="the same, one key pair after pair" ;;
      dlock) what="dlock: dlock_acquire, then dlock_release, a key per pair (row inserted, swept)" ;;
      dlock_reused) what="the same, one key pair after pair (its row written over in place)" ;;
    esac
    p=$(printing "$name")
    echo "| $what | $(k "${cost[$name]}") | $(ratio "${cost[$name]}" "${cost[bound]}") | $(k "$p") | $(ratio "$((cost[$name] - p))" "$((cost[bound] - $(printing bound)))") |"
  done
  echo
  echo "dlock's pair, split (inclusive costs per pair):"
  echo
  echo "| part | one key pair after pair | a key per pair |"
  echo "|---|---:|---:|"
  row() { echo "| $1 | $(k "$2") | $(k "$3") |"; }
  split() {
    local w=$1 acquire release definer
    acquire=$(part dlock_acquire_wrapper "$w")
    release=$(part dlock_release_wrapper "$w")
    # The functions are not SECURITY DEFINER and set no search_path of their own (each statement
    # they run pins it): fmgr_security_definer wraps them only if some release still did that.
    definer=$(part fmgr_security_definer "$w")
    if [ "$definer" -lt $((acquire + release)) ]; then definer=$((acquire + release)); fi
    echo "$acquire $release $((definer - acquire - release)) $(part AtEOXact_GUC "$w") $(part dlock::store::sweep::after_grant "$w") $((cost[$w] - definer))"
  }
  read -r -a reused <<<"$(split dlock_reused)"
  read -r -a fresh <<<"$(split dlock)"
  row "dlock_acquire's own work (key lock, read, write of the row, fence)" "${reused[0]}" "${fresh[0]}"
  row "of which the sweep (a random page read, due rows deleted)" "${reused[4]}" "${fresh[4]}"
  row "dlock_release's own work (key lock, read, row freed)" "${reused[1]}" "${fresh[1]}"
  row "around both calls: a SECURITY DEFINER wrapper, if any (0.2.0 pinned search_path on every function; 0.3.0 on none)" "${reused[2]}" "${fresh[2]}"
  row "GUC restores at call and transaction ends (AtEOXact_GUC; included above for the calls)" "${reused[3]}" "${fresh[3]}"
  row "everything else (protocol, executor start and end, two commits)" "${reused[5]}" "${fresh[5]}"
  echo
  echo "Counters (\`dlock.track_stats\`), on the one-key pair: their own functions cost $(k "$counters_on") per pair on, $(k "$counters_off") off:"
  echo "$(k "$((counters_on - counters_off))") per pair, $(awk -v a="$((counters_on - counters_off))" -v b="${cost[untracked]}" 'BEGIN { printf "%.1f", a * 100 / b }') % of the pair with them off ($(k "${cost[untracked]}"); on, $(k "${cost[dlock_reused]}"))."
} >"$report"
cp "$work"/*.cg "$out/"
cat "$report"
echo "bench: instructions written to $report"
