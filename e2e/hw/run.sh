#!/usr/bin/env bash
# Runs test suites inside the hardware guest, on the binaries of a host
# build directory, and exits with their status: by default, in one boot,
# the PM suite (label pm, on devdax and fsdax), the transport suite (label
# net, on verbs over soft-RoCE), the pDKVS suites on PM (label pdkvs, on a
# DAX file) and the cluster suite's kill and restart tests (label cluster:
# a monitor and three servers on devdax, everything on verbs);
# PDPM_HW_LABELS picks fewer (PDPM_HW_LABELS=cluster: the cluster suite).
#
#   e2e/hw/run.sh <build-dir> [--bench]
#
# The guest boots under QEMU software emulation with an emulated NVDIMM and
# no network; the repository comes in read-only over 9p at the same path,
# so test binaries find everything where the host build put it. A timeout
# around QEMU (PDPM_HW_TIMEOUT seconds) guarantees it never hangs. Where
# QEMU cannot run, it says so loudly and fails, unless PDPM_SKIP_HW=1.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: run.sh <build-dir> [--bench]}" && pwd)
bench=${2:-}
labels=${PDPM_HW_LABELS:-pm net pdkvs cluster}
# The cluster binaries take minutes each emulated (docs/hw.md "Cost").
timeout_s=${PDPM_HW_TIMEOUT:-$([[ " $labels " == *" cluster "* ]] && echo 1800 || echo 600)}

cannot_run() {
  echo "!!!!!! HARDWARE GUEST NOT RUN: $* — verbs and DAX are untested (PDPM_SKIP_HW=1 skips) !!!!!!" >&2
  if [[ ${PDPM_SKIP_HW:-0} == 1 ]]; then exit 0; fi
  exit 1
}

command -v qemu-system-x86_64 >/dev/null || cannot_run "qemu-system-x86_64 is not installed"
command -v debootstrap >/dev/null || cannot_run "debootstrap is not installed"
[[ $(id -u) -eq 0 ]] || cannot_run "building the guest image needs root"
image=$("$here/build-image.sh") || cannot_run "the guest image could not be built"

run=$(mktemp -d "${TMPDIR:-/tmp}/pdpm-hw.XXXXXX")
qemu_pid=
cleanup() {
  [[ -n $qemu_pid ]] && kill -9 "$qemu_pid" 2>/dev/null
  rm -rf "$run"
}
trap cleanup EXIT

# What of the cluster and pdkvs suites runs in the guest, with a gtest
# filter: what starts servers or puts PM on DAX (not the unit tests on
# anonymous memory, nor the CLI and Redis comparisons, which need tcp and
# host tools). docs/hw.md says why these and what they cost.
guest_selection="
cluster client_cluster_test ${PDPM_HW_CLUSTER_FILTER:-ClusterTest.RestartedServer*:ClusterTest.KillServer*}
cluster client_tx_cluster_test ${PDPM_HW_CLUSTER_FILTER:-Copies/TxClusterTest.BankInvariantWithAServerKilledAndRestarted/Two}
cluster pdkvs_cluster_test ${PDPM_HW_CLUSTER_FILTER:-KvClusterTest.KillDuringWritesLosesNothing:KvClusterTest.ServerKilledDuringMultiPuts*}
pdkvs pdkvs_index_crash_test CcehKillTest.*
pdkvs pdkvs_gateway_test LocalKvStoreTest.*
"
# The plan: every binary of the pm and net suites, the selection above of
# the cluster and pdkvs ones, once each, with the seconds after which the
# guest kills it (PDPM_HW_BINARY_TIMEOUT, else 300; 600 for a cluster
# binary, whose tests take minutes emulated). PDPM_HW_LABELS picks the
# labels: make test-hw runs them all, make test-hw-cluster the cluster one.
for label in $labels; do
  ctest --test-dir "$build" --show-only=json-v1 -L "^${label}\$" |
    jq -r --arg suite "$label" '.tests[] | "\($suite) \(.command[0]) \(
      [.properties[]? | select(.name == "WORKING_DIRECTORY") | .value][0] // "/tmp")"' |
    sort -u | while read -r suite binary workdir; do
      # Test binaries not built in this tree are not part of the run.
      [[ -x $binary ]] || continue
      filter='*'
      if [[ $suite != pm && $suite != net ]]; then
        filter=$(awk -v s="$suite" -v b="$(basename "$binary")" \
          '$1 == s && $2 == b { print $3 }' <<<"$guest_selection")
        [[ -n $filter ]] || continue
      fi
      binary_timeout=${PDPM_HW_BINARY_TIMEOUT:-$([[ $suite == cluster ]] && echo 600 || echo 300)}
      echo "$suite $binary $workdir $binary_timeout $filter"
    done >>"$run/plan"
done
# Deadlines against hangs inside the guest are this many times the host's
# (PDPM_TEST_TIMEOUT_SCALE): emulation on a loaded host is that much slower.
echo "${PDPM_HW_TIMEOUT_SCALE:-5}" >"$run/timeout-scale"
# PDPM_HW_FILTER: a gtest filter for every binary (narrowing a debug run);
# PDPM_HW_REPEAT: each binary runs its tests that many times (a flake
# hunt; each binary's timeout grows as much).
if [[ -n ${PDPM_HW_FILTER:-} ]]; then echo "$PDPM_HW_FILTER" >"$run/filter"; fi
echo "${PDPM_HW_REPEAT:-1}" >"$run/repeat"
if [[ $bench == --bench ]]; then
  install -m 0755 "$here/guest-bench.sh" "$run/bench.sh"
  echo "$build" >"$run/bench-build"
  : >"$run/plan"  # a benchmark run measures only
fi
if [[ ! -s $run/plan && $bench != --bench ]]; then
  echo "hw: no tests of the labels $labels in $build" >&2
  exit 1
fi
echo "hw: $(wc -l <"$run/plan") test binaries; guest image $(basename "$image")"

truncate -s 2G "$run/pmem.img"
console=$run/console.log
qemu-system-x86_64 \
  -machine pc,nvdimm=on -accel tcg,thread=multi -cpu max -smp 2 \
  -m 2G,slots=2,maxmem=6G \
  -object memory-backend-file,id=mem1,share=on,mem-path="$run/pmem.img",size=2G \
  -device nvdimm,id=nvdimm1,memdev=mem1,label-size=128K \
  -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
  -append "console=ttyS0 root=/dev/vda rw init=/sbin/pdpm-init pdpm_share=$repo quiet loglevel=3 panic=-1" \
  -drive file="$image/rootfs.ext4",format=raw,if=virtio,snapshot=on \
  -virtfs local,path="$repo",mount_tag=pdpm,security_model=none,readonly=on \
  -virtfs local,path="$run",mount_tag=pdpmrun,security_model=none,readonly=on \
  -nic none -display none -monitor none -serial file:"$console" -no-reboot \
  </dev/null >"$run/qemu.log" 2>&1 &
qemu_pid=$!
start=$(date +%s)
tail -n +1 -F "$console" 2>/dev/null | grep --line-buffered -E '^(HW-|  \| |BENCH |net\.)' &
tail_pid=$!
while kill -0 "$qemu_pid" 2>/dev/null; do
  if (($(date +%s) - start > timeout_s)); then
    echo "hw: guest still running after ${timeout_s}s — killing QEMU" >&2
    kill -9 "$qemu_pid"
    break
  fi
  sleep 1
done
qemu_status=0
wait "$qemu_pid" 2>/dev/null || qemu_status=$?
qemu_pid=
sleep 0.5
kill "$tail_pid" 2>/dev/null || true
wait "$tail_pid" 2>/dev/null || true

if [[ ! -s $console ]]; then
  echo "hw: QEMU (exit status $qemu_status) did not start the guest from $image:" >&2
  cat "$run/qemu.log" >&2
  ls -la "$run" >&2
  exit 1
fi
tr -d '\r' <"$console" >"$run/console.txt"
if grep -q '^HW-SETUP FAIL' "$run/console.txt"; then
  echo "hw: guest setup failed" >&2
  exit 1
fi
exit_line=$(grep -a '^HW-EXIT' "$run/console.txt" | tail -1 || true)
if [[ -z $exit_line ]]; then
  echo "hw: the guest did not finish (timeout or crash); last console lines:" >&2
  tail -20 "$run/console.txt" >&2
  cat "$run/qemu.log" >&2
  exit 1
fi
grep -a '^BENCH ' "$run/console.txt" || true
passed=$(grep -c '^HW-RESULT .* PASS' "$run/console.txt" || true)
failed=$(grep -c '^HW-RESULT .* FAIL' "$run/console.txt" || true)
echo "hw: $passed suites passed, $failed failed, guest ran $(($(date +%s) - start))s ($exit_line)"
[[ $exit_line == "HW-EXIT 0" && $failed -eq 0 ]]
