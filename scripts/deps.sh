#!/usr/bin/env bash
# Installs what building and testing PDPM needs, from Debian's packages.
# Idempotent and fast when everything is present: it only asks apt when a
# package is missing.
#   scripts/deps.sh        what the build and `make test` need
#   scripts/deps.sh build  only what building the C++ core needs (the
#                          build stage of images/Dockerfile.core)
#   scripts/deps.sh e2e    also what the Kubernetes e2e suite (e2e/k8s) and
#                          the daemonless image build (images/) need
#   scripts/deps.sh bench  also what `make bench-fs` runs: fio, the
#                          GlusterFS reference, perf for its profiles
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config ccache
  # core dependencies
  libpmem2-dev libpmem-dev libibverbs-dev librdmacm-dev rdma-core
  libgtest-dev libgmock-dev libbenchmark-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libfuse3-dev fuse3 uuid-dev
)
if [[ ${1:-} != build ]]; then
  packages+=(
    # sanitizers, fuzzers, lint
    clang clang-format clang-tidy libclang-rt-14-dev
    # real programs the pDFS mount tests run (tar and diff are essential)
    git sqlite3 rsync
    # setfacl/getfacl for the POSIX ACL tests through the mount
    acl
    # real parts the tests and benchmarks start
    etcd-server etcd-client redis-server redis-tools iperf3 sockperf
    # the pDKVS gateway comparison test keeps redis-py in a venv
    python3-venv
    # the hardware guest (e2e/hw): QEMU, its Debian root file system, plan parsing
    qemu-system-x86 debootstrap jq
  )
fi
if [[ ${1:-} == e2e ]]; then
  packages+=(
    # a single-node Kubernetes: container runtime, pod network, kube-proxy's
    # iptables rules
    containerd runc containernetworking-plugins iptables conntrack
    # images without a container daemon: a Debian root file system packed as
    # OCI images; the pause image is a static C program
    debootstrap umoci libc6-dev
  )
elif [[ ${1:-} == bench ]]; then
  packages+=(
    # the pDFS benchmark: fio through the mounts, GlusterFS (replica 2 on
    # tmpfs bricks) as the reference, iproute2 for its network namespace,
    # perf for the profiles of missed goals
    fio glusterfs-server glusterfs-client iproute2 linux-perf
  )
elif [[ -n ${1:-} && $1 != build ]]; then
  echo "deps: unknown group '$1' (build, e2e or bench)" >&2
  exit 2
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "deps: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
