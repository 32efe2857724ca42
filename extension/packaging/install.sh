#!/bin/sh
# Installs dlock into the PostgreSQL 18 whose pg_config is given (or first on PATH):
#   ./install.sh [/path/to/pg_config]
# The library is put in place by rename, never written over in place, so that backends of a
# running server that have the old one loaded keep running it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
pg_config=${1:-pg_config}
major=$("$pg_config" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
if [ "$major" != 18 ]; then
  echo "install.sh: $pg_config is PostgreSQL ${major:-?}; this package is for PostgreSQL 18" >&2
  exit 2
fi
lib=$("$pg_config" --pkglibdir)
share=$("$pg_config" --sharedir)/extension
cp "$here/lib/dlock.so" "$lib/.dlock.so.new"
mv -f "$lib/.dlock.so.new" "$lib/dlock.so"
for f in "$here"/extension/*; do
  cp "$f" "$share/"
done
echo "install.sh: dlock installed into $lib and $share"
