#!/usr/bin/env bash
# iRDMA tcp benchmark with its references, measured in the same run on
# loopback: iperf3 (one TCP stream) for one-sided READ/WRITE bandwidth and
# sockperf TCP ping-pong for RPC latency. Prints every figure with its
# reference and ratio, and one BENCH line each.
#
#   scripts/bench-net.sh <build dir> [seconds per figure]
set -euo pipefail
build_dir=${1:?usage: bench-net.sh <build dir> [seconds]}
seconds=${2:-0.5}
bench="$build_dir/src/net/net_bench"
[[ -x $bench ]] || { echo "bench-net: $bench not built" >&2; exit 1; }
for tool in iperf3 sockperf; do
  command -v "$tool" >/dev/null || { echo "bench-net: $tool missing (make deps)" >&2; exit 1; }
done

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Reference 1: iperf3, one stream, 128 KiB writes, bytes per second.
port=$(free_port)
iperf3 -s -1 -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
pids+=($!)
sleep 0.3
iperf3 -c 127.0.0.1 -p "$port" -t 3 -J >"$work/iperf.json"
iperf_mbs=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.3f" % (d["end"]["sum_received"]["bits_per_second"]/8e6))' "$work/iperf.json")

# Reference 2: sockperf TCP ping-pong, 64-byte messages. sockperf reports
# half the round trip; the RPC figure is a whole round trip, so compare
# with twice its median.
port=$(free_port)
sockperf sr --tcp -i 127.0.0.1 -p "$port" >/dev/null 2>&1 &
pids+=($!)
sleep 0.3
sockperf pp --tcp -i 127.0.0.1 -p "$port" -t 3 -m 64 >"$work/sockperf.txt" 2>&1
sockperf_p50=$(awk '/percentile 50.000/ {print $NF}' "$work/sockperf.txt")
sockperf_rtt=$(python3 -c "print('%.3f' % (2*float('$sockperf_p50')))")
# Its message rate (one connection, one message in flight), in kcalls/s.
sockperf_rate=$(sed -n 's/.*RunTime=\([0-9.]*\) sec; SentMessages=[0-9]*; ReceivedMessages=\([0-9]*\).*/\2 \1/p' \
  "$work/sockperf.txt" | awk '{printf "%.3f", $1 / $2 / 1000}')

# PDPM: server and client as separate processes.
mkfifo "$work/server.in"
"$bench" server 127.0.0.1:0 127.0.0.1:0 <"$work/server.in" >"$work/server.out" &
pids+=($!)
exec 9>"$work/server.in"  # the server runs until this closes
for _ in $(seq 100); do grep -q '^LISTEN' "$work/server.out" 2>/dev/null && break; sleep 0.1; done
read -r _ raw_addr rpc_addr <"$work/server.out"
"$bench" client "$raw_addr" "$rpc_addr" "$seconds" >"$work/client.out"
exec 9>&-

printf '%-22s %9s %-8s %-13s %10s %8s\n' figure value unit reference value ratio
while read -r _ name value unit; do
  case $name in
    write.*|read.*) ref_name=iperf3; ref=$iperf_mbs ;;
    rpc64.p50|rpc64.p99) ref_name=sockperf_rtt; ref=$sockperf_rtt ;;
    rpc64.x4) ref_name=sockperf_rate; ref=$sockperf_rate ;;
    *) echo "bench-net: unknown figure $name" >&2; exit 1 ;;
  esac
  id=net.tcp.$name
  ratio=$(python3 -c "print('%.3f' % ($value/$ref))")
  printf '%-22s %9s %-8s %-13s %10s %8s\n' "$id" "$value" "$unit" "$ref_name" "$ref" "$ratio"
  echo "BENCH name=$id value=$value unit=$unit ref=$ref_name:$ref ratio=$ratio"
done <"$work/client.out"
