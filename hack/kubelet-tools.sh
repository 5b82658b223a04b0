#!/usr/bin/env bash
# kubelet-tools.sh makes sure the parts of the real Kubernetes node that
# the tests run (internal/testing/kubelettest) are on the machine:
# Debian's containerd, runc, containernetworking-plugins (bridge,
# host-local, loopback), busybox-static (the node's one image is made from
# it: no registry is reachable) and iproute2, and for the network fault
# tests (internal/testing/netns) nftables and iptables, installed with
# apt-get when one is missing (as root, or through sudo). The kubelet itself is built
# by kube-tools.sh. A second run finds them and does nothing; nothing here
# starts anything.
#
# PELOTON_SKIP_KUBELET=1 skips the install, and the real-node tests skip
# too; without it a machine where the install fails fails them with the
# reason, rather than passing without a node.
set -euo pipefail

if [ "${PELOTON_SKIP_KUBELET:-}" = "1" ]; then
  echo "kubelet-tools: PELOTON_SKIP_KUBELET=1, not installing"
  exit 0
fi
need=()
for pair in containerd:containerd ctr:containerd runc:runc busybox:busybox-static ip:iproute2 nft:nftables iptables:iptables; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)

SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo -n"
  else
    echo "kubelet-tools: not root (no sudo): install ${need[*]}, or set PELOTON_SKIP_KUBELET=1" >&2
    exit 0 # the real-node tests will fail and say why
  fi
fi
echo "installing ${need[*]} (Debian packages) for the real-node tests"
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -qq "${need[@]}" >/dev/null 2>&1; then
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq "${need[@]}" >/dev/null || {
    echo "kubelet-tools: apt-get install failed; the real-node tests will fail (PELOTON_SKIP_KUBELET=1 skips them)" >&2
    exit 0
  }
fi
