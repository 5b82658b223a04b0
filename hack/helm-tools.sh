#!/usr/bin/env bash
# helm-tools.sh builds helm from the Go module proxy, once per machine, into
#   $HELM_TOOLS_DIR/bin/helm  (the Makefile: ~/.cache/peloton/helm/<version>)
# outside the clone, so every fresh clone on the machine reuses one build.
# deploy/helm's tests lint and render the chart with it. A stamp file
# records what was built; a second run with the same version and script
# does nothing.
#
# The ldflags are those helm's own Makefile sets: its version, and the
# Kubernetes version that `helm lint` and `helm template` assume without
# --kube-version (one minor above the client-go it is built with). Without
# them helm says it is v3.x and checks charts against Kubernetes 1.20.
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.22.0}
GO=${GO:-go}

cache=${HELM_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/peloton/helm/$HELM_VERSION}
bin=$cache/bin
stamp=$bin/.stamp
want="helm=$HELM_VERSION script=$(sha256sum "$0" | cut -c1-16)"

if [[ -f $stamp && "$(cat "$stamp")" == "$want" && -x $bin/helm ]]; then
	exit 0
fi

log() { printf 'helm-tools: %s\n' "$*" >&2; }
mkdir -p "$bin"
rm -f "$stamp"

export GOWORK=off CGO_ENABLED=0 GOFLAGS="${HELM_TOOLS_GOFLAGS:--p=2} -trimpath"

log "fetching helm.sh/helm/v3@$HELM_VERSION"
gomod=$(cd /tmp && GOFLAGS= $GO mod download -json "helm.sh/helm/v3@$HELM_VERSION" |
	sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[[ -f $gomod ]] || { log "module download failed"; exit 1; }
clientgo=$(sed -n 's/^[[:space:]]*k8s\.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod" | head -1)
[[ -n $clientgo ]] || { log "no k8s.io/client-go in helm's go.mod"; exit 1; }

pkg=helm.sh/helm/v3
ldflags="-s -w -X $pkg/internal/version.version=$HELM_VERSION -X $pkg/internal/version.gitTreeState=clean"
for p in pkg/lint/rules pkg/chartutil; do
	ldflags+=" -X $pkg/$p.k8sVersionMajor=1 -X $pkg/$p.k8sVersionMinor=$clientgo"
done

log "building helm $HELM_VERSION (about three minutes)"
start=$SECONDS
GOBIN=$bin $GO install -ldflags "$ldflags" "$pkg/cmd/helm@$HELM_VERSION"
log "built helm in $((SECONDS - start))s"
echo "$want" >"$stamp"
