#!/usr/bin/env bash
# promtool.sh puts Prometheus' promtool at $PROMTOOL (the Makefile:
# ~/.cache/peloton/promtool/bin/promtool), for the alert rules' unit tests
# (deploy/prometheus). It is Debian's: the promtool of the `prometheus`
# package, taken out of the package with dpkg-deb rather than installed, so
# no Prometheus server is set up or started on the machine. A promtool
# already on PATH is used instead. A second run finds it and does nothing.
# When neither works the script says so and exits 0: the tests then fail
# naming what is missing.
set -euo pipefail

PROMTOOL=${PROMTOOL:?PROMTOOL names where promtool goes}
if [[ -x $PROMTOOL ]] && "$PROMTOOL" --version >/dev/null 2>&1; then
	exit 0
fi
mkdir -p "$(dirname "$PROMTOOL")"
if have=$(command -v promtool); then
	ln -sf "$have" "$PROMTOOL"
	exit 0
fi

log() { printf 'promtool: %s\n' "$*" >&2; }
SUDO=""
if [[ $(id -u) != 0 ]] && command -v sudo >/dev/null 2>&1; then
	SUDO="sudo -n"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log "fetching Debian's prometheus package for its promtool"
if ! (cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1); then
	$SUDO apt-get update -qq >/dev/null 2>&1 || true
	(cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1) || {
		log "apt-get download prometheus failed; the alert rules' unit tests will fail"
		exit 0
	}
fi
dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
install -m 0755 "$tmp/x/usr/bin/promtool" "$PROMTOOL.tmp"
mv "$PROMTOOL.tmp" "$PROMTOOL"
"$PROMTOOL" --version 2>&1 | head -1 >&2
