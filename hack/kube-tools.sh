#!/usr/bin/env bash
# kube-tools.sh builds the Kubernetes parts the test suite runs for real:
# kube-apiserver, kube-scheduler and kube-controller-manager (for its
# disruption controller, which computes PodDisruptionBudgets' status) and
# kubelet (for the real-pod tests, internal/testing/kubelettest) from
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
# BUILD names how the binaries are built: bump it when the build below
# changes, and every tool is built again. Each tool has its own stamp, so a
# tool added to the list is built alone, the others kept.
BUILD=2
kube_tools=(kube-apiserver kube-scheduler kube-controller-manager kubelet)
want_of() { # TOOL: what its stamp must say
	case $1 in
	kwok) echo "kwok=$KWOK_VERSION build=$BUILD" ;;
	*) echo "kubernetes=$KUBE_VERSION build=$BUILD" ;;
	esac
}
built() { [[ -x $bin/$1 && -f $bin/.stamp-$1 && "$(cat "$bin/.stamp-$1")" == "$(want_of "$1")" ]]; }

mkdir -p "$bin"
# A cache from before the per-tool stamps: its one stamp vouches for the
# binaries it lists, built the same way.
if [[ -f $stamp && ! -f $bin/.stamp-kube-apiserver ]] && grep -q "^kubernetes=$KUBE_VERSION kwok=$KWOK_VERSION script=" "$stamp"; then
	for t in kube-apiserver kube-scheduler kwok; do
		[[ -x $bin/$t ]] && want_of "$t" >"$bin/.stamp-$t"
	done
fi

todo=()
for t in "${kube_tools[@]}"; do
	built "$t" || todo+=("$t")
done
if [[ ${#todo[@]} -eq 0 ]] && built kwok; then
	[[ -f $stamp ]] || echo "kubernetes=$KUBE_VERSION kwok=$KWOK_VERSION build=$BUILD" >"$stamp"
	exit 0
fi

log() { printf 'kube-tools: %s\n' "$*" >&2; }
rm -f "$stamp"

export GOWORK=off GOFLAGS="${KUBE_TOOLS_GOFLAGS:--p=2} -mod=mod -trimpath" CGO_ENABLED=0

if [[ ${#todo[@]} -gt 0 ]]; then
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

	for cmd in "${todo[@]}"; do
		log "building $cmd $KUBE_VERSION (a few minutes)"
		start=$SECONDS
		(cd "$src" && $GO build -ldflags "$ldflags" -o "$bin/$cmd.tmp" "./cmd/$cmd")
		mv "$bin/$cmd.tmp" "$bin/$cmd"
		want_of "$cmd" >"$bin/.stamp-$cmd"
		log "built $cmd in $((SECONDS - start))s"
	done
	# The copied source is only needed to build; keep the cache small.
	rm -rf "$src"
fi

if ! built kwok; then
	log "building kwok $KWOK_VERSION"
	start=$SECONDS
	GOBIN=$bin $GO install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
	want_of kwok >"$bin/.stamp-kwok"
	log "built kwok in $((SECONDS - start))s"
fi

echo "kubernetes=$KUBE_VERSION kwok=$KWOK_VERSION build=$BUILD" >"$stamp"
"$bin/kube-apiserver" --version >&2
