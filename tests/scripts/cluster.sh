#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the demo, pg_regress, benchmarks and tests: of the
# PostgreSQL whose pg_config $PG_CONFIG names (15 or 18), Debian's 15 when unset.
#
#   scripts/cluster.sh start DIR [postgresql.conf lines...]   initdb (if new) and start
#   scripts/cluster.sh stop DIR [fast|immediate]                stop
#   scripts/cluster.sh env DIR                                  print PGHOST/PGPORT/PGUSER exports
#   scripts/cluster.sh plant DIR DB                             the hostile-schema net's traps into DB
#   scripts/cluster.sh destroy DIR                              stop it and remove it (data too)
#
# The cluster lives in DIR, listens on a unix socket in DIR and on 127.0.0.1 at a free port,
# and runs as the `postgres` user when we are root (initdb refuses root).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/hostile.sh"

# The binaries of the PostgreSQL whose pg_config is given: never a PG_BIN inherited from a caller
# that meant another one.
PG_BIN=$("${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}" --bindir)
cmd=${1:?usage: cluster.sh start|stop|env DIR}
dir=${2:?usage: cluster.sh start|stop|env DIR}
shift 2

# A free port below the kernel's ephemeral range (32768-60999 by default): a port the kernel
# hands out is soon the source port of some outgoing connection of the tests, which then holds
# it when the server binds.
free_port() {
  python3 -c '
import random, socket
for _ in range(500):
    port, s = random.randint(20000, 32000), socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        print(port)
        break
    except OSError:
        pass
    finally:
        s.close()'
}

case "$cmd" in
start)
  # A clone under a private directory (mktemp -d is 0700) is out of reach for `postgres`:
  # the cluster then lives in /tmp, behind a symlink at DIR (kept across restarts).
  if [ ! -L "$dir" ]; then
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
      chown postgres: "$dir"
      if ! runuser -u postgres -- test -w "$dir"; then
        real=$(mktemp -d /tmp/dlock-cluster.XXXXXX)
        chown postgres: "$real"
        rmdir "$dir" 2>/dev/null || rm -rf "$dir"
        ln -s "$real" "$dir"
      fi
    fi
  fi
  dir=$(readlink -f "$dir")
  new=
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    new=1
    as_owner "$PG_BIN/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log"
    port=$(free_port)
    {
      echo "listen_addresses = '127.0.0.1'"
      echo "port = $port"
      echo "unix_socket_directories = '$dir'"
      echo "max_connections = 200"
      echo "shared_buffers = 256MB"
      echo "logging_collector = off"
      echo "log_min_messages = warning"
      for line in "$@"; do echo "$line"; done
    } >>"$dir/data/postgresql.conf"
  fi
  if ! as_owner "$PG_BIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    for attempt in 1 2 3 4 5; do
      logged=$(stat -c %s "$dir/server.log" 2>/dev/null || echo 0)
      # A developer's RUST_BACKTRACE would put pgrx backtraces into every error's DETAIL.
      if as_owner env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE \
        "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null; then
        break
      fi
      # Another process took the port between its choice and the bind: choose another.
      if [ "$attempt" -lt 5 ] && tail -c +"$((logged + 1))" "$dir/server.log" | grep -q 'could not bind .*Address already in use'; then
        port=$(free_port)
        echo "cluster.sh: the port was taken; starting $dir on port $port instead" >&2
        sed -i "s/^port = .*/port = $port/" "$dir/data/postgresql.conf"
        continue
      fi
      echo "cluster.sh: the server in $dir did not start (see $dir/server.log)" >&2
      exit 1
    done
  fi
  # DLOCK_HOSTILE=1: the hostile-schema net (tests/scripts/hostile.sh), in a new cluster.
  if [ -n "$new" ] && [ "${DLOCK_HOSTILE:-}" = 1 ]; then
    hostile_install "$dir" "$(sed -n 's/^port = \([0-9]*\)$/\1/p' "$dir/data/postgresql.conf" | tail -n 1)"
  fi
  "$0" env "$dir"
  ;;
stop)
  mode=${1:-fast}
  # Nothing to stop where nothing was ever started (a fresh clone has no build/ yet).
  if [ ! -e "$dir" ] && [ ! -L "$dir" ]; then exit 0; fi
  dir=$(readlink -f "$dir")
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -m "$mode" -w -t 60 stop >/dev/null || true
  fi
  hostile_collect "$dir"
  ;;
destroy)
  "$0" stop "$dir" immediate
  if [ -L "$dir" ]; then rm -rf "$(readlink -f "$dir")"; fi
  rm -rf "$dir"
  ;;
plant)
  # The hostile-schema net's traps into database $1 of a running cluster (tests/scripts/hostile.sh).
  dir=$(readlink -f "$dir")
  hostile_plant "$dir" "$(sed -n 's/^port = \([0-9]*\)$/\1/p' "$dir/data/postgresql.conf" | tail -n 1)" "${1:?usage: cluster.sh plant DIR DB}"
  ;;
env)
  dir=$(readlink -f "$dir")
  port=$(sed -n 's/^port = \([0-9]*\)$/\1/p' "$dir/data/postgresql.conf" | tail -n 1)
  echo "export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=postgres"
  ;;
*)
  echo "unknown command: $cmd" >&2
  exit 2
  ;;
esac
