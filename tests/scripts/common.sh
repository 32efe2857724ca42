# Sourced by every script of the project: strict mode, and a failing command says what failed
# on stderr (never a silent `exit 1` under `set -e`).
set -Eeuo pipefail
trap 'status=$?; echo "${0##*/}: line ${LINENO}: \`${BASH_COMMAND}\` failed (exit ${status})" >&2' ERR

# Runs a command as `postgres` when we are root (initdb and the server refuse root).
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# The database pg_regress would make for itself (with --use-existing it leaves that to us):
# dlock_regress, with the settings pg_regress gives one of its own, owned by $1 (default: $PGUSER,
# as cluster.sh sets it). Under the hostile-schema net (DLOCK_HOSTILE=1) from template1, which has
# its traps; else from template0.
regress_database() {
  local template=template0
  [ "${DLOCK_HOSTILE:-}" = 1 ] && template=template1
  psql -X -q -v ON_ERROR_STOP=1 -d postgres -v template="$template" -v owner="${1:-${PGUSER:-postgres}}" <<'SQL'
CREATE DATABASE dlock_regress TEMPLATE :"template" OWNER :"owner";
ALTER DATABASE dlock_regress SET lc_messages TO 'C';
ALTER DATABASE dlock_regress SET lc_monetary TO 'C';
ALTER DATABASE dlock_regress SET lc_numeric TO 'C';
ALTER DATABASE dlock_regress SET lc_time TO 'C';
ALTER DATABASE dlock_regress SET bytea_output TO 'hex';
ALTER DATABASE dlock_regress SET timezone_abbreviations TO 'Default';
SQL
}
