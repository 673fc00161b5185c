#!/usr/bin/env bash
# Builds kube-apiserver from k8s.io/kubernetes (through the Go module proxy)
# for the operator's envtest, and caches it under
# ${XDG_CACHE_HOME:-~/.cache}/pdpm/envtest/<version>/. Prints the directory
# holding the binaries (kube-apiserver, etcd) — the KUBEBUILDER_ASSETS value.
# Rebuilds only when the cached binary is missing.
set -euo pipefail
version=${KUBE_VERSION:-v1.34.4}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/pdpm/envtest/$version
bin=$cache/kube-apiserver
if [[ ! -x $bin ]]; then
  mkdir -p "$cache"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "envtest: building kube-apiserver $version (cold build takes minutes)" >&2
  # The staging modules k8s.io/kubernetes replaces with local directories
  # must be pinned to their published versions (v0.Y.Z for vX.Y.Z).
  gomod=$(go mod download -json "k8s.io/kubernetes@$version" |
    sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')
  staging_version=v0.${version#v1.}
  {
    echo "module pdpm.io/envtest-kube-apiserver"
    echo
    echo "go 1.24"
    echo
    echo "require k8s.io/kubernetes $version"
    echo
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod" | sort -u |
      while read -r m; do echo "replace $m => $m $staging_version"; done
  } >"$work/go.mod"
  cat >"$work/tools.go" <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
  major=${version#v}
  major=${major%%.*}
  minor=${version#v*.}
  minor=${minor%%.*}
  (
    cd "$work"
    GOFLAGS=-mod=mod go mod tidy >&2
    GOFLAGS=-mod=mod CGO_ENABLED=0 go build -p 2 -o "$bin.tmp" \
      -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$version \
        -X k8s.io/component-base/version.gitMajor=$major \
        -X k8s.io/component-base/version.gitMinor=$minor" \
      k8s.io/kubernetes/cmd/kube-apiserver
  )
  mv "$bin.tmp" "$bin"
fi
etcd_bin=$(command -v etcd || true)
if [[ -z $etcd_bin ]]; then
  echo "envtest: etcd not found (Debian package etcd-server)" >&2
  exit 1
fi
ln -sf "$etcd_bin" "$cache/etcd"
echo "$cache"
