#!/usr/bin/env bash
# pDSM benchmark with its reference measured in the same run: iperf3 (one
# TCP stream over loopback) against raw 64 KiB reads and persisted writes
# and object put/get at 4 KiB and 1 MiB through libpdpm, and transactions
# against the same accesses without a transaction, on a three-server
# local cluster that this script starts with `pdpm up --replicas 1` (TCP
# transport, file-backed PM) and stops again; then the 64 KiB write on a
# cluster with two copies (dsm.write.64KiB.r2); then the failover time
# after kill -9 (dsm.failover.ms) and after SIGSTOP (dsm.failover.freeze.ms,
# median and worst of ten) (dsm_failover_bench, its own cluster;
# reference: the monitor's down timeout it runs with). Prints every figure with its reference and ratio,
# and one BENCH line each.
#
# The PM files live on tmpfs (/dev/shm when it exists, else $TMPDIR): memory
# is what stands in for PM here; on a disk-backed file every persist is a
# disk flush and the figures would measure the disk.
#
#   scripts/bench-dsm.sh <build dir> [duration per figure, e.g. 2s]
set -euo pipefail
build_dir=${1:?usage: bench-dsm.sh <build dir> [duration]}
duration=${2:-2s}
pdpm="$build_dir/src/tools/pdpm"
bench="$build_dir/src/tools/dsm_bench"
failover="$build_dir/src/tools/dsm_failover_bench"
for f in "$pdpm" "$bench" "$failover"; do
  [[ -x $f ]] || { echo "bench-dsm: $f not built" >&2; exit 1; }
done
command -v iperf3 >/dev/null || { echo "bench-dsm: iperf3 missing (make deps)" >&2; exit 1; }

shm=/dev/shm
[[ -d $shm && -w $shm ]] || shm=${TMPDIR:-/tmp}
work=$(mktemp -d -p "$shm")
pids=()
cleanup() {
  "$pdpm" down --dir "$work/cluster" >/dev/null 2>&1 || true
  "$pdpm" down --dir "$work/cluster2" >/dev/null 2>&1 || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Reference: iperf3, one stream, MB/s (10^6 bytes/s) as received.
port=$(free_port)
iperf3 -s -1 -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
pids+=($!)
sleep 0.3
iperf3 -c 127.0.0.1 -p "$port" -t 3 -J >"$work/iperf.json"
iperf_mbs=$(jq -r '.end.sum_received.bits_per_second / 8e6 | . * 1000 | floor / 1000' "$work/iperf.json")

"$pdpm" up --dir "$work/cluster" --pm-size 1GiB --segment-size 64MiB --replicas 1 \
  --monitor-port "$(free_port)" --server-port "$(free_port)" >/dev/null
# A failing bench still shows the figures measured before its error.
rc=0
"$bench" --monitor "$(cat "$work/cluster/monitor.addr")" \
  --secret-file "$work/cluster/cluster.secret" --duration "$duration" >"$work/bench.out" || rc=$?
"$pdpm" down --dir "$work/cluster" >/dev/null

# Two copies: every write is persisted on both before it returns.
"$pdpm" up --dir "$work/cluster2" --pm-size 1GiB --segment-size 64MiB --replicas 2 \
  --monitor-port "$(free_port)" --server-port "$(free_port)" >/dev/null
"$bench" --monitor "$(cat "$work/cluster2/monitor.addr")" --figures write \
  --secret-file "$work/cluster2/cluster.secret" --duration "$duration" >>"$work/bench.out" || rc=$?
"$pdpm" down --dir "$work/cluster2" >/dev/null

PDPM_TEST_TMPDIR=$work "$failover" --rounds 10 >"$work/failover.out" 2>"$work/failover.err" || {
  rc=1
  cat "$work/failover.err" >&2
}
# A hung server (SIGSTOP), with the monitor's default timing (50 ms
# heartbeats, 250 ms suspect, 500 ms down).
PDPM_TEST_TMPDIR=$work "$failover" --freeze --rounds 10 --suspect-timeout 250ms \
  >"$work/freeze.out" 2>"$work/freeze.err" || {
  rc=1
  cat "$work/freeze.err" >&2
}

printf '%-20s %9s %-5s %-13s %9s %7s\n' figure value unit reference value ratio
# A figure names its own reference when it has one (transactions: the same
# accesses without a transaction); otherwise iperf3.
while read -r _ name value unit ref ref_value; do
  id=dsm.$name
  if [[ -z ${ref:-} ]]; then
    ref=iperf3
    ref_value=$iperf_mbs
  fi
  ratio=$(python3 -c "print('%.3f' % ($value/$ref_value))")
  printf '%-20s %9s %-5s %-13s %9s %7s\n' "$id" "$value" "$unit" "$ref" "$ref_value" "$ratio"
  echo "BENCH name=$id value=$value unit=$unit ref=$ref:$ref_value ratio=$ratio"
done <"$work/bench.out"
if grep -q '^FIGURE failover.ms' "$work/failover.out"; then
  read -r _ _ value unit <"$work/failover.out"
  ref=$(awk '$1 == "REF" { print $3 }' "$work/failover.out")
  ratio=$(python3 -c "print('%.3f' % ($value/$ref))")
  printf '%-20s %9s %-5s %-9s %9s %7s\n' dsm.failover.ms "$value" "$unit" down_timeout "$ref" "$ratio"
  echo "BENCH name=dsm.failover.ms value=$value unit=$unit ref=heartbeat_timeout:$ref ratio=$ratio"
fi
if grep -q '^FIGURE failover.freeze.ms' "$work/freeze.out"; then
  read -r _ _ value unit worst <"$work/freeze.out"
  ref=$(awk '$1 == "REF" { print $3 }' "$work/freeze.out")
  ratio=$(python3 -c "print('%.3f' % ($value/$ref))")
  printf '%-20s %9s %-5s %-9s %9s %7s (worst %s ms)\n' dsm.failover.freeze.ms "$value" "$unit" \
    down_timeout "$ref" "$ratio" "$worst"
  echo "BENCH name=dsm.failover.freeze.ms value=$value unit=$unit ref=down_timeout:$ref ratio=$ratio worst=$worst"
fi
exit $rc
