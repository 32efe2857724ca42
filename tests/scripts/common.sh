# Sourced by every script of the project: strict mode, and a failing command says what failed
# on stderr (never a silent `exit 1` under `set -e`).
set -Eeuo pipefail
trap 'status=$?; echo "${0##*/}: line ${LINENO}: \`${BASH_COMMAND}\` failed (exit ${status})" >&2' ERR
