#!/usr/bin/env bash
# Regenerates the Go code of the pDFS volume API (proto/pdpm/v1/pdfs.proto)
# in the CSI driver, with the same pinned generators as the operator
# (scripts/operator-tools.sh). With --check, generates into a scratch
# directory and fails if the committed files differ.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools=$("$root/scripts/operator-tools.sh")
pkg=pdpm.io/pdpm/csi-driver/internal/pdpmv1

generate() { # output directory: the module root
  PATH=$tools:$PATH protoc -I "$root/proto" \
    --go_out="$1" --go_opt=module=pdpm.io/pdpm/csi-driver \
    --go_opt=Mpdpm/v1/pdfs.proto=$pkg \
    --go-grpc_out="$1" --go-grpc_opt=module=pdpm.io/pdpm/csi-driver \
    --go-grpc_opt=Mpdpm/v1/pdfs.proto=$pkg \
    pdpm/v1/pdfs.proto
}

if [[ ${1:-} == --check ]]; then
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  generate "$scratch"
  if ! diff -r "$root/csi-driver/internal/pdpmv1" "$scratch/internal/pdpmv1" >&2; then
    echo "csi-generate: generated files are out of date; run scripts/csi-generate.sh" >&2
    exit 1
  fi
  echo "csi-generate: generated files up to date"
else
  generate "$root/csi-driver"
fi
