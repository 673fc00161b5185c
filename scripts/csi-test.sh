#!/usr/bin/env bash
# The CSI driver's tests (docs/csi.md): generated code up to date, gofmt
# and go vet clean, the unit tests of every service's argument checks,
# then csi-sanity against the driver serving a live local PDPM cluster
# (pdpm up in a temporary directory, real pdfs-fuse mounts: needs root and
# /dev/fuse). Prints each phase's time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: csi-test.sh BUILD_DIR}" && pwd)
phase() { # name command...
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "csi-test: $name took $((SECONDS - start)) s"
}
cd "$root/csi-driver"
phase generate-check "$root/scripts/csi-generate.sh" --check
unformatted=$(gofmt -l .)
if [[ -n $unformatted ]]; then
  echo "csi-test: not gofmt-clean: $unformatted" >&2
  exit 1
fi
phase vet go vet ./...
phase unit go test -count=1 ./pkg/...
phase sanity env PDPM_BIN_DIR="$build" go test -count=1 -timeout 10m -v ./test/sanity/ -ginkgo.no-color
