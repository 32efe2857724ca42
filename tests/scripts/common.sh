# Sourced by every script of the project: strict mode, and a failing command says what failed
# on stderr (never a silent `exit 1` under `set -e`).
set -Eeuo pipefail
trap 'status=$?; echo "${0##*/}: line ${LINENO}: \`${BASH_COMMAND}\` failed (exit ${status})" >&2' ERR

# Runs a command as `postgres` when we are root (initdb and the server refuse root).
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
