#!/usr/bin/env bash
# Builds the Kubernetes tools the Helm chart's tests and the e2e suite use,
# from source through the Go module proxy, once: kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kube-proxy and kubectl
# (k8s.io/kubernetes), helm, helm-unittest and CoreDNS. Each lands in
# ${XDG_CACHE_HOME:-~/.cache}/pdpm/k8s/<tool>-<version>/ and is rebuilt
# only when missing, so a new version never reuses an old binary.
#
#   scripts/k8s-tools.sh [tool...]   builds the named tools (default: all)
#                                    and prints the directory holding links
#                                    to the current version of each.
# Tools: kubernetes (the six binaries), helm, helm-unittest, coredns.
# KUBE_VERSION overrides the Kubernetes version (default v1.34.4).
set -euo pipefail
KUBE_VERSION=${KUBE_VERSION:-v1.34.4}
HELM_VERSION=v3.19.0
HELM_UNITTEST_VERSION=v1.0.3
COREDNS_VERSION=v1.15.0
KUBE_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

cache=${XDG_CACHE_HOME:-$HOME/.cache}/pdpm/k8s
bin=$cache/bin
mkdir -p "$bin"

log() { echo "k8s-tools: $*" >&2; }

# Links the built binaries of one tool version into $bin.
link() { # dir binary...
  local dir=$1
  shift
  for b in "$@"; do ln -sfn "$dir/$b" "$bin/$b"; done
}

# Builds packages of a module whose go.mod has replace directives (which
# `go install pkg@version` refuses) through a wrapper module that requires
# it and repeats its replacements. k8s.io/kubernetes replaces its staging
# modules (k8s.io/api, ...) with local directories: those are pinned to
# their published versions instead (v0.Y.Z for v1.Y.Z).
build_wrapped() ( # dir module version ldflags package...
  dir=$1 module=$2 version=$3 ldflags=$4
  shift 4
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  gomod=$(go mod download -json "$module@$version" |
    sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')
  {
    echo "module pdpm.io/k8s-tools"
    echo
    echo "go 1.24"
    echo
    echo "require $module $version"
    echo
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod" | sort -u |
      while read -r m; do echo "replace $m => $m v0.${version#v1.}"; done
    sed -n 's#^\s*\(replace \)\?\([^ ]\+ v[^ ]\+ => [^.][^ ]* v[^ ]\+\)$#replace \2#p' "$gomod"
  } >"$work/go.mod"
  {
    echo "//go:build tools"
    echo
    echo "package tools"
    echo
    for p in "$@"; do echo "import _ \"$p\""; done
  } >"$work/tools.go"
  mkdir -p "$dir.tmp"
  cd "$work"
  GOFLAGS=-mod=mod go mod tidy >&2
  GOFLAGS=-mod=mod CGO_ENABLED=0 go build -p 2 -trimpath -o "$dir.tmp/" -ldflags "-s -w $ldflags" "$@"
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
)

build_kubernetes() {
  local dir=$cache/kubernetes-$KUBE_VERSION
  local missing=0 c major minor v
  for c in "${KUBE_COMMANDS[@]}"; do [[ -x $dir/$c ]] || missing=1; done
  if ((missing)); then
    log "building Kubernetes $KUBE_VERSION (${KUBE_COMMANDS[*]}); about 15 minutes cold on 2 cores"
    major=${KUBE_VERSION#v}
    major=${major%%.*}
    minor=${KUBE_VERSION#v*.}
    minor=${minor%%.*}
    # kubectl cannot parse a server version without these.
    v="-X k8s.io/component-base/version.gitVersion=$KUBE_VERSION
      -X k8s.io/component-base/version.gitMajor=$major
      -X k8s.io/component-base/version.gitMinor=$minor
      -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION
      -X k8s.io/client-go/pkg/version.gitMajor=$major
      -X k8s.io/client-go/pkg/version.gitMinor=$minor"
    local pkgs=()
    for c in "${KUBE_COMMANDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
    build_wrapped "$dir" k8s.io/kubernetes "$KUBE_VERSION" "$(echo $v)" "${pkgs[@]}"
  fi
  link "$dir" "${KUBE_COMMANDS[@]}"
}

# A plain `go install` of a module without replace directives.
build_go_install() { # name version package binary
  local name=$1 version=$2 package=$3 binary=$4
  local dir=$cache/$name-$version
  if [[ ! -x $dir/$binary ]]; then
    log "building $name $version"
    mkdir -p "$dir.tmp"
    GOBIN=$dir.tmp GOFLAGS=-mod=mod CGO_ENABLED=0 go install -p 2 -trimpath \
      -ldflags "-s -w" "$package@$version"
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
  fi
  link "$dir" "$binary"
}

tools=("$@")
((${#tools[@]})) || tools=(kubernetes helm helm-unittest coredns)
for t in "${tools[@]}"; do
  case $t in
  kubernetes) build_kubernetes ;;
  helm) build_go_install helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm helm ;;
  helm-unittest)
    # Its go.mod replaces a dependency with a fork.
    dir=$cache/helm-unittest-$HELM_UNITTEST_VERSION
    if [[ ! -x $dir/helm-unittest ]]; then
      log "building helm-unittest $HELM_UNITTEST_VERSION"
      build_wrapped "$dir" github.com/helm-unittest/helm-unittest "$HELM_UNITTEST_VERSION" "" \
        github.com/helm-unittest/helm-unittest/cmd/helm-unittest
    fi
    link "$dir" helm-unittest
    ;;
  coredns) build_go_install coredns "$COREDNS_VERSION" github.com/coredns/coredns coredns ;;
  *)
    log "unknown tool '$t' (kubernetes, helm, helm-unittest, coredns)"
    exit 2
    ;;
  esac
done
echo "$bin"
