#!/usr/bin/env bash
# Fences survive a crash: grants made under synchronous_commit = off, then a crash of the
# machine, then a restart: the key's next fence is larger than every fence handed out before.
#
# The machine's crash is simulated: the WAL writer is kept from flushing (wal_writer_delay 10 s,
# wal_writer_flush_after 1GB), the server is stopped immediately (no checkpoint), and the WAL
# past the flushed position read just before the stop is zeroed (what a power loss would lose
# of what was written to the OS but not flushed). Every acknowledged synchronous commit is at
# or before that position.
#
# The control run proves the test can fail: with the grant's durable commit switched off
# (dlock_internal.durable_commit replaced by a no-op), the same steps must hand out a fence
# again. If the control does not, the setup no longer loses what it should, and the test fails.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# lose_unflushed_wal SEGMENT OFFSET: zero the WAL from there on (as root: the files are the
# server's).
lose_unflushed_wal() {
  local wal
  wal=$(readlink -f "$SQLED_DIR")/data/pg_wal
  python3 - "$wal" "$1" "$2" <<'PY'
import os, sys
wal, seg, off = sys.argv[1], sys.argv[2], int(sys.argv[3])
for name in sorted(os.listdir(wal)):
    path = os.path.join(wal, name)
    if len(name) != 24 or name < seg:
        continue
    start = off if name == seg else 0
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(b"\0" * (size - start))
PY
}

run() {
  local label=$1 disable=$2 max=0 f next
  sqled_cluster "crash-$label" "wal_writer_delay = 10000ms" "wal_writer_flush_after = 1GB" "checkpoint_timeout = 1h" "bgwriter_lru_maxpages = 0"
  q postgres "CHECKPOINT" >/dev/null
  # The WAL writer flushes on its first round whatever its settings: let that happen now,
  # then it waits 10 s before flushing again (the cycles below take far less).
  q postgres "SET synchronous_commit = off; CREATE TABLE warm_up (); DROP TABLE warm_up" >/dev/null
  sleep 1.5
  if [ "$disable" = 1 ]; then
    q app_owner "CREATE OR REPLACE FUNCTION dlock_internal.durable_commit() RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS \$\$ BEGIN END \$\$" >/dev/null
  fi
  # One session, synchronous_commit off: 70 lock cycles on one key (more than twice the 32
  # values the sequence logs ahead, so that its WAL records fall into the lost tail), every
  # fence kept on the client side.
  local fences
  fences=$( {
    echo "SET synchronous_commit = off;"
    for i in $(seq 1 70); do
      echo "SELECT dlock_acquire('crash:k', 'o', '1 hour');"
      echo "SELECT dlock_release('crash:k', 'o') \\g /dev/null"
    done
  } | psql -X -q -At -v ON_ERROR_STOP=1 -U app_owner -d app)
  for f in $fences; do [ "$f" -gt "$max" ] && max=$f; done
  [ "$max" -gt 0 ] || fail "$label: no fence was handed out"
  local at
  at=$(q postgres "SELECT file_name || ' ' || file_offset FROM pg_walfile_name_offset(pg_current_wal_flush_lsn())")
  sqled_stop immediate
  lose_unflushed_wal $at
  sqled_start
  # A release the crash lost leaves its lease live (until its ttl): free the key first.
  q postgres "SELECT dlock_force_release('crash:k')" >/dev/null
  next=$(q app_owner "SELECT dlock_acquire('crash:k', 'o2', '1 hour')")
  echo "$label: last fence before the crash $max, first after it $next"
  sqled_destroy
  [ -n "$next" ] || fail "$label: the key was not granted after the crash"
  [ "$next" -gt "$max" ]
}

if run control 1; then
  fail "control: with the durable commit off a fence should have repeated after the crash; the setup no longer loses unflushed WAL"
fi
echo "control: a fence repeated without the durable commit (as expected)"
run durable 0 || fail "a fence repeated after the crash"
echo "crash: fences grew across the crash"
