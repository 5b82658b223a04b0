#!/usr/bin/env bash
# chromium.sh makes sure a Chromium the browser tests can drive is on the
# machine: Debian's `chromium` package, installed with apt-get when missing
# (as root, or through sudo when it is there). A second run finds it and
# does nothing. It caches nothing in the clone.
#
# PELOTON_SKIP_BROWSER=1 skips the install, and the browser tests skip too;
# without it a machine where the install fails fails those tests with the
# reason, rather than passing without having looked at a page.
set -euo pipefail

if [ "${PELOTON_SKIP_BROWSER:-}" = "1" ]; then
  echo "chromium: PELOTON_SKIP_BROWSER=1, not installing"
  exit 0
fi
for name in chromium chromium-browser google-chrome; do
  if command -v "$name" >/dev/null 2>&1; then
    exit 0
  fi
done

SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo -n"
  else
    echo "chromium: not installed and not root (no sudo): install Debian's chromium package, or set PELOTON_SKIP_BROWSER=1" >&2
    exit 0 # the browser tests will fail and say why
  fi
fi
echo "installing chromium (Debian package) for the browser tests"
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -qq chromium >/dev/null 2>&1; then
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq chromium >/dev/null || {
    echo "chromium: apt-get install failed; the browser tests will fail (PELOTON_SKIP_BROWSER=1 skips them)" >&2
    exit 0
  }
fi
command -v chromium >/dev/null
