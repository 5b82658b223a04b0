#!/usr/bin/env bash
# kube-tools.sh builds the Kubernetes parts the test suite runs for real:
# kube-apiserver, kube-scheduler and kube-controller-manager (for its
# disruption controller, which computes PodDisruptionBudgets' status) from
# the k8s.io/kubernetes module, and
# kwok from sigs.k8s.io/kwok, all through the Go module proxy, into
#   $KUBE_TOOLS_DIR/bin/  (the Makefile: ~/.cache/peloton/kube/<kubernetes version>)
# outside the clone, so every fresh clone on the machine reuses one build.
# A stamp file records what was built; a second run with the same versions
# and the same script does nothing.
#
# Why it is not just `go install`: the k8s.io/kubernetes module as published
# points its k8s.io/* dependencies at a ./staging tree that the module zip does
# not contain. We copy the module out of the module cache into a writable
# folder, drop those replace directives and require the k8s.io/* v0.x release
# that matches instead. Without the version ldflags the binaries say v0.0.0,
# which clients (kwok among them) refuse, so we set them.
#
# Each build takes minutes and about 2 GiB of memory; they run one after the
# other, with a parallelism of 2 inside each.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
GO=${GO:-go}

cache=${KUBE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/peloton/kube/$KUBE_VERSION}
bin=$cache/bin
stamp=$bin/.stamp
want="kubernetes=$KUBE_VERSION kwok=$KWOK_VERSION script=$(sha256sum "$0" | cut -c1-16)"

if [[ -f $stamp && "$(cat "$stamp")" == "$want" ]] &&
	[[ -x $bin/kube-apiserver && -x $bin/kube-scheduler && -x $bin/kube-controller-manager && -x $bin/kwok ]]; then
	exit 0
fi

log() { printf 'kube-tools: %s\n' "$*" >&2; }
mkdir -p "$bin"
rm -f "$stamp"

export GOWORK=off GOFLAGS="${KUBE_TOOLS_GOFLAGS:--p=2} -mod=mod -trimpath" CGO_ENABLED=0

# kubernetes: a writable copy of the module with its staging replaces undone.
log "fetching k8s.io/kubernetes@$KUBE_VERSION"
moddir=$(cd /tmp && GOFLAGS= $GO mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -d $moddir ]] || { log "module download failed"; exit 1; }
src=$cache/src
rm -rf "$src"
mkdir -p "$src"
cp -a "$moddir/." "$src/"
chmod -R u+w "$src"
rm -f "$src/go.work" "$src/go.work.sum"

minor=${KUBE_VERSION#v1.}
stagever=v0.$minor
edits=()
while read -r mod; do
	edits+=(-dropreplace="$mod" -require="$mod@$stagever")
done < <(sed -n 's|^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/.*|\1|p' "$src/go.mod")
(cd "$src" && $GO mod edit "${edits[@]}")

major=1
minor_num=${minor%%.*}
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor_num"
	ldflags+=" -X $pkg.gitCommit=module-$KUBE_VERSION -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
done

for cmd in kube-apiserver kube-scheduler kube-controller-manager; do
	log "building $cmd $KUBE_VERSION (a few minutes)"
	start=$SECONDS
	(cd "$src" && $GO build -ldflags "$ldflags" -o "$bin/$cmd.tmp" "./cmd/$cmd")
	mv "$bin/$cmd.tmp" "$bin/$cmd"
	log "built $cmd in $((SECONDS - start))s"
done

log "building kwok $KWOK_VERSION"
start=$SECONDS
GOBIN=$bin $GO install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
log "built kwok in $((SECONDS - start))s"

# The copied source is only needed to build; keep the cache small.
rm -rf "$src"
echo "$want" >"$stamp"
"$bin/kube-apiserver" --version >&2
