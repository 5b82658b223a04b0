#!/usr/bin/env bash
# postgres.sh makes sure the PostgreSQL server the history store's tests
# run is on the machine: Debian's `postgresql` package, installed with
# apt-get when no server is under /usr/lib/postgresql/<version>/bin (as
# root, or through sudo when it is there). A second run finds it and does
# nothing. The tests start servers of their own (internal/testing/pgtest);
# nothing here starts or configures one. It caches nothing in the clone.
#
# PELOTON_SKIP_POSTGRES=1 skips the install, and those tests skip too;
# without it a machine where the install fails fails them with the
# reason, rather than passing without a server.
set -euo pipefail

if [ "${PELOTON_SKIP_POSTGRES:-}" = "1" ]; then
  echo "postgres: PELOTON_SKIP_POSTGRES=1, not installing"
  exit 0
fi
for bin in /usr/lib/postgresql/*/bin; do
  if [ -x "$bin/postgres" ] && [ -x "$bin/initdb" ]; then
    exit 0
  fi
done

SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo -n"
  else
    echo "postgres: not installed and not root (no sudo): install Debian's postgresql package, or set PELOTON_SKIP_POSTGRES=1" >&2
    exit 0 # the PostgreSQL tests will fail and say why
  fi
fi
echo "installing postgresql (Debian package) for the history store's tests"
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -qq postgresql >/dev/null 2>&1; then
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq postgresql >/dev/null || {
    echo "postgres: apt-get install failed; the PostgreSQL tests will fail (PELOTON_SKIP_POSTGRES=1 skips them)" >&2
    exit 0
  }
fi
ls /usr/lib/postgresql/*/bin/postgres >/dev/null
