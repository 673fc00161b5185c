#!/usr/bin/env bash
# The operator's envtest assets: kube-apiserver (built from source through
# the Go module proxy by scripts/k8s-tools.sh, cached per version) and
# Debian's etcd, linked into ${XDG_CACHE_HOME:-~/.cache}/pdpm/envtest/<version>/.
# Prints that directory — the KUBEBUILDER_ASSETS value.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${KUBE_VERSION:-v1.34.4}
bin=$(KUBE_VERSION=$version "$root/scripts/k8s-tools.sh" kubernetes)
etcd_bin=$(command -v etcd || true)
if [[ -z $etcd_bin ]]; then
  echo "envtest: etcd not found (Debian package etcd-server)" >&2
  exit 1
fi
assets=${XDG_CACHE_HOME:-$HOME/.cache}/pdpm/envtest/$version
mkdir -p "$assets"
ln -sfn "$(readlink -f "$bin/kube-apiserver")" "$assets/kube-apiserver"
ln -sfn "$etcd_bin" "$assets/etcd"
echo "$assets"
