#!/usr/bin/env bash
# CPU time and context switches per request of the pDKVS gateway's cluster
# (docs/benchmarks.md "pDKVS", issue 7): starts `pdpm up` as
# scripts/bench-kv.sh does (three servers, --replicas 2) and redis-server,
# runs one warm-up SET -P 16, then each case against the gateway and Redis,
# and prints per case the throughput of both and, from /proc, the CPU time
# (utime + stime) per request and the context switches (voluntary +
# involuntary) per request of the cluster (monitor, servers, gateway) and
# of redis-server. Unlike throughput, these hold on a busy shared host: the
# CPU ratio says how far the cluster is from Redis's cost per request.
# usage: scripts/bench-kv-cpu.sh BUILD_DIR [REQUESTS] [CASE...]
#   CASE: set:16:64 (test:pipeline:value bytes); default set:16:64
#   get:16:64 set:16:1024 set:1:64 get:1:64
set -euo pipefail
build=$1
requests=${2:-150000}
shift $(($# < 2 ? $# : 2))
cases=("$@")
((${#cases[@]})) || cases=(set:16:64 get:16:64 set:16:1024 set:1:64 get:1:64)
pdpm=$build/src/tools/pdpm
source "$(dirname "$0")/kv-bench-cluster.sh"
start_kv_bench_cluster pdkvs-cpu
mapfile -t cluster_pids < <(cat "$dir"/cluster/*.pid)

# Sum over the given processes: "ticks switches".
usage() {
  local t=0 c=0 p
  for p in "$@"; do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    c=$((c + $(cat "/proc/$p"/task/*/status | awk '/ctxt_switches/ {s += $2} END {print s}')))
  done
  echo "$t $c"
}
rps() {  # port pipeline test value_size
  redis-benchmark -p "$1" -c 50 -n "$requests" -P "$2" -t "$3" -d "$4" -r 100000 -q 2>/dev/null |
    tr '\r' '\n' | awk '/requests per second/ {v=$2} END {print v+0}'
}
hz=$(getconf CLK_TCK)
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
rps "$gport" 16 set 64 >/dev/null
for c in "${cases[@]}"; do
  IFS=: read -r t p d <<<"$c"
  read -r t0 c0 < <(usage "${cluster_pids[@]}")
  g=$(rps "$gport" "$p" "$t" "$d")
  read -r t1 c1 < <(usage "${cluster_pids[@]}")
  read -r rt0 rc0 < <(usage "$rpid")
  r=$(rps "$rport" "$p" "$t" "$d")
  read -r rt1 rc1 < <(usage "$rpid")
  awk -v t="$t" -v p="$p" -v d="$d" -v g="$g" -v r="$r" -v dt=$((t1 - t0)) -v dc=$((c1 - c0)) \
    -v rdt=$((rt1 - rt0)) -v rdc=$((rc1 - rc0)) -v n="$requests" -v hz="$hz" 'BEGIN {
      cpu = dt * 1e6 / hz / n; rcpu = rdt * 1e6 / hz / n
      printf "%s -P%s %sB: gateway %s redis %s ratio %.3f cpu_us/req %.2f csw/req=%.2f" \
        " redis_cpu_us/req %.2f redis_csw/req=%.2f cpu_ratio %.2f\n",
        t, p, d, g, r, (r > 0 ? g / r : 0), cpu, dc / n, rcpu, rdc / n,
        (rcpu > 0 ? cpu / rcpu : 0) }'
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
