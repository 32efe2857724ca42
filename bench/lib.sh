# What every benchmark script starts with (sourced): the failing command named on stderr
# (tests/scripts/common.sh), the repository's paths, the PostgreSQL to run, the run's timestamp,
# and free_port.
source "$(dirname "${BASH_SOURCE[0]}")/../tests/scripts/common.sh"
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$root/build}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
export PG_BIN=$("$PG_CONFIG" --bindir)
pg_bin=$PG_BIN
cluster_sh="$root/tests/scripts/cluster.sh"
stamp=$(date -u +%Y%m%dT%H%M%SZ)

# A free TCP port on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
