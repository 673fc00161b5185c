#!/usr/bin/env bash
# Installs the pinned code generators of the operator (controller-gen,
# protoc-gen-go, protoc-gen-go-grpc) from the Go module proxy into
# ${XDG_CACHE_HOME:-~/.cache}/pdpm/tools/bin and prints that directory.
# Installs only what is missing.
set -euo pipefail
CONTROLLER_TOOLS_VERSION=v0.19.0
PROTOC_GEN_GO_VERSION=v1.36.11
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
bin=${XDG_CACHE_HOME:-$HOME/.cache}/pdpm/tools/bin
mkdir -p "$bin"
install() { # name version package
  local stamp="$bin/.$1-$2"
  if [[ ! -x $bin/$1 || ! -f $stamp ]]; then
    echo "operator-tools: installing $1 $2" >&2
    GOBIN=$bin GOFLAGS=-mod=mod go install "$3@$2"
    rm -f "$bin/.$1-"*
    touch "$stamp"
  fi
}
install controller-gen "$CONTROLLER_TOOLS_VERSION" sigs.k8s.io/controller-tools/cmd/controller-gen
install protoc-gen-go "$PROTOC_GEN_GO_VERSION" google.golang.org/protobuf/cmd/protoc-gen-go
install protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION" google.golang.org/grpc/cmd/protoc-gen-go-grpc
echo "$bin"
