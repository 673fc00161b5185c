#!/usr/bin/env bash
# `make e2e` (docs/e2e.md): PDPM on a real single-node Kubernetes started
# here. Phases, each timed: the Kubernetes tools (built once, cached), the
# images (daemonless, from images/*.list), the charts' lint and unit tests,
# the cluster (e2e/k8s/cluster.sh) with the images imported, the Go suite
# (e2e/k8s), and the teardown, which runs however the rest ended.
#
#   e2e/k8s/run.sh BUILD_DIR        BUILD_DIR: the C++ release build
#
# PDPM_E2E_DIR is the cluster's state directory (default
# ${TMPDIR:-/tmp}/pdpm-e2e); its logs/ stay after the run. Extra flags for
# `go test` go in PDPM_E2E_GOFLAGS (e.g. -run, or -args -keep).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)
state=${PDPM_E2E_DIR:-${TMPDIR:-/tmp}/pdpm-e2e}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/pdpm
images=$cache/images/out

timings=()
phase() { # name command...
  local name=$1 start ms rc=0
  shift
  echo "=== e2e: $name" >&2
  start=$(date +%s%N)
  "$@" || rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  timings+=("$(printf '%-12s %5d.%d s' "$name" $((ms / 1000)) $((ms % 1000 / 100)))$( ((rc == 0)) || echo "  FAILED ($rc)")")
  return $rc
}

tools() { bin=$("$root/scripts/k8s-tools.sh"); }

chart_checks() {
  local c
  for c in pdpm pdpm-cluster; do
    "$bin/helm" lint --strict "$root/charts/$c"
  done
  "$bin/helm-unittest" --color=false "$root/charts/pdpm" "$root/charts/pdpm-cluster"
}

cluster_up() {
  "$here/cluster.sh" up "$state" "$bin" "$images"/{core,operator,csi,e2e-client,pause}.tar
  # Scenario 7 upgrades the cluster to a new tag of the core image: the same
  # content under the tag the suite's -upgrade-tag defaults to.
  local version
  version=$(<"$root/VERSION")
  ctr --address "$state/containerd/containerd.sock" -n k8s.io images tag \
    "docker.io/pdpm/core:$version" "docker.io/pdpm/core:$version-upgrade" >/dev/null
}

suite() {
  # shellcheck disable=SC2086 # flags as words
  (cd "$here" && PATH=$bin:$PATH go test -count=1 -timeout 30m -v ${PDPM_E2E_GOFLAGS:-} . \
    -args -kubeconfig "$state/kubeconfig" -kubectl "$bin/kubectl" -helm "$bin/helm" -pull-policy Never \
    -logs "$state/logs/suite" -kubelet-dir "$state/kubelet" -csi-state-dir "$state/pdpm-csi")
}

# Runs however the script ends: the cluster goes (if it was started) and
# the phase times are printed.
cluster_started=0
finish() {
  local rc=$?
  if ((cluster_started)); then phase teardown "$here/cluster.sh" down "$state" || rc=1; fi
  echo "=== e2e: phase times" >&2
  printf '  %s\n' "${timings[@]}" >&2
  if ((rc != 0)); then echo "e2e: FAILED${cluster_started:+; cluster logs in $state/logs}" >&2; fi
  exit $rc
}
trap finish EXIT

"$root/scripts/deps.sh" e2e
phase tools tools
phase images "$root/images/build.sh" "$build" "$images"
phase charts chart_checks
cluster_started=1
phase cluster-up cluster_up
phase suite suite
