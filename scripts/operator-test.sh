#!/usr/bin/env bash
# The operator's tests: generated code and manifests up to date, then the
# Go tests against a real kube-apiserver and etcd (envtest), with the
# kube-apiserver built from source once and cached.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/operator-generate.sh" --check
assets=$("$root/scripts/envtest-kube-apiserver.sh")
cd "$root/operator"
KUBEBUILDER_ASSETS=$assets go test -count=1 -timeout 15m ./...
