#!/usr/bin/env bash
# Regenerates everything generated in the operator: deepcopy functions, the
# PDPMCluster CRD and the operator's RBAC role (controller-gen; the Helm
# chart gets copies of both in charts/pdpm/files), and the Go code of the
# control-plane protobufs (protoc). With --check, generates into a scratch
# copy and fails if the committed files differ.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools=$("$root/scripts/operator-tools.sh")

generate() { # repository root to generate in
  local dir=$1
  # Generated into the operator module, leaving the shared .proto untouched.
  PATH=$tools:$PATH protoc -I "$dir/proto" \
    --go_out="$dir/operator" --go_opt=module=pdpm.io/pdpm/operator \
    --go_opt=Mpdpm/v1/monitor.proto=pdpm.io/pdpm/operator/internal/pdpmv1 \
    --go-grpc_out="$dir/operator" --go-grpc_opt=module=pdpm.io/pdpm/operator \
    --go-grpc_opt=Mpdpm/v1/monitor.proto=pdpm.io/pdpm/operator/internal/pdpmv1 \
    pdpm/v1/monitor.proto
  (
    cd "$dir/operator"
    "$tools/controller-gen" object paths=./api/...
    "$tools/controller-gen" crd rbac:roleName=pdpm-operator paths=./... \
      output:crd:artifacts:config="$dir/config/crd/bases" \
      output:rbac:artifacts:config="$dir/config/rbac"
  )
  mkdir -p "$dir/charts/pdpm/files/crds" "$dir/charts/pdpm/files/rbac"
  cp "$dir/config/crd/bases/pdpm.io_pdpmclusters.yaml" "$dir/charts/pdpm/files/crds/"
  cp "$dir/config/rbac/role.yaml" "$dir/charts/pdpm/files/rbac/"
}

if [[ ${1:-} == --check ]]; then
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  mkdir -p "$scratch/charts"
  cp -r "$root/operator" "$root/config" "$root/proto" "$scratch/"
  cp -r "$root/charts/pdpm" "$scratch/charts/"
  generate "$scratch"
  for d in operator config charts/pdpm/files; do
    if ! diff -r "$root/$d" "$scratch/$d" >&2; then
      echo "operator-generate: generated files are out of date; run scripts/operator-generate.sh" >&2
      exit 1
    fi
  done
  echo "operator-generate: generated files up to date"
else
  generate "$root"
fi
