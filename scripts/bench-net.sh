#!/usr/bin/env bash
# iRDMA tcp benchmark with its references, measured in the same run on
# loopback: iperf3 (one TCP stream) for one-sided READ/WRITE bandwidth and
# sockperf TCP ping-pong for RPC latency and rate. Prints every figure with
# its reference and ratio, and one BENCH line each. Each figure and each
# reference is the median of BENCH_ROUNDS (3) interleaved rounds.
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

rounds=${BENCH_ROUNDS:-3}

# Reference 1: iperf3, one stream, 128 KiB writes, MB/s.
iperf_round() {
  local port
  port=$(free_port)
  iperf3 -s -1 -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
  sleep 0.3
  iperf3 -c 127.0.0.1 -p "$port" -t 1 -J >"$work/iperf.json"
  wait $! 2>/dev/null || true
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.3f" % (d["end"]["sum_received"]["bits_per_second"]/8e6))' "$work/iperf.json"
}

# Reference 2: sockperf TCP ping-pong, 64-byte messages. sockperf reports
# half the round trip; the RPC figures are whole round trips, so they are
# compared with twice its median. Also its message rate (one connection,
# one message in flight) in kcalls/s.
port=$(free_port)
sockperf sr --tcp -i 127.0.0.1 -p "$port" >/dev/null 2>&1 &
pids+=($!)
sleep 0.3
sockperf_round() {
  sockperf pp --tcp -i 127.0.0.1 -p "$port" -t 1 -m 64 >"$work/sockperf.txt" 2>&1
  local p50 rate
  p50=$(awk '/percentile 50.000/ {print $NF}' "$work/sockperf.txt")
  rate=$(sed -n 's/.*RunTime=\([0-9.]*\) sec; SentMessages=[0-9]*; ReceivedMessages=\([0-9]*\).*/\2 \1/p' \
    "$work/sockperf.txt" | awk '{printf "%.3f", $1 / $2 / 1000}')
  python3 -c "print('%.3f %s' % (2*float('$p50'), '$rate'))"
}

# PDPM: server and client as separate processes.
mkfifo "$work/server.in"
"$bench" server 127.0.0.1:0 127.0.0.1:0 <"$work/server.in" >"$work/server.out" &
pids+=($!)
exec 9>"$work/server.in"  # the server runs until this closes
for _ in $(seq 100); do grep -q '^LISTEN' "$work/server.out" 2>/dev/null && break; sleep 0.1; done
read -r _ raw_addr rpc_addr <"$work/server.out"

# Rounds of reference, PDPM, reference, ...: every figure is the median of
# its rounds, so a burst of load from other work on the host skews less.
: >"$work/all"
for round in $(seq "$rounds"); do
  echo "REF iperf3 $(iperf_round)" >>"$work/all"
  read -r rtt rate < <(sockperf_round)
  echo "REF sockperf_rtt $rtt" >>"$work/all"
  echo "REF sockperf_rate $rate" >>"$work/all"
  "$bench" client "$raw_addr" "$rpc_addr" "$seconds" >>"$work/all"
done
exec 9>&-

python3 - "$work/all" <<'PY'
import statistics, sys
refs, figs, units, order = {}, {}, {}, []
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "REF":
        refs.setdefault(f[1], []).append(float(f[2]))
    elif f[0] == "RESULT":
        if f[1] not in figs:
            order.append(f[1])
        figs.setdefault(f[1], []).append(float(f[2]))
        units[f[1]] = f[3]
def ref_for(name):
    if name.startswith(("write.", "read.")): return "iperf3"
    if name in ("rpc64.p50", "rpc64.p99"): return "sockperf_rtt"
    if name == "rpc64.x4": return "sockperf_rate"
    sys.exit("bench-net: unknown figure " + name)
print("%-24s %10s %-9s %-14s %10s %7s" % ("figure", "value", "unit", "reference", "value", "ratio"))
bench = []
for name in order:
    v = statistics.median(figs[name])
    rn = ref_for(name)
    r = statistics.median(refs[rn])
    print("%-24s %10.3f %-9s %-14s %10.3f %7.3f" % ("net.tcp." + name, v, units[name], rn, r, v / r))
    bench.append("BENCH name=net.tcp.%s value=%.3f unit=%s ref=%s:%.3f ratio=%.3f"
                 % (name, v, units[name], rn, r, v / r))
print("\n".join(bench))
PY
