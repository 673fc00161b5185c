#!/usr/bin/env bash
# make bench-kv: redis-benchmark (50 clients, 16 B keys, 64 B and 1 KiB
# values, -P 1 and -P 16, SET and GET), then pdkvs-loadgen (YCSB A, B and C
# with uniform and zipfian keys, ETC and SYS; docs/pdkvs.md), against the
# pDKVS gateway of a local PDPM cluster (`pdpm up`: three servers on PM
# files in memory, every segment on two of them, a write acknowledged once
# durable on both) and against redis-server 7 without persistence, in the
# same run. Then HSET (redis-benchmark's test: random fields of one hash)
# and HGET of those fields, -P 16, 64 B values. Prints BENCH lines (ref
# redis), and kv.resp.mset.1000: an MSET
# of 1,000 keys against the same keys as pipelined SETs on the gateway
# (scripts/kv-mset-bench.py; lines for 2 to 10,000 keys, distinct and
# each named twice).
# usage: scripts/bench-kv.sh BUILD_DIR [REQUESTS]
# env: LOADGEN_RECORDS (default 100000), LOADGEN_OPS (run phase, default
# 50000), LOADGEN_SECONDS (run phase bound, default 20), LOADGEN_ROUNDS
# (default 3; 0 skips pdkvs-loadgen)
set -euo pipefail
build=$1
requests=${2:-200000}
records=${LOADGEN_RECORDS:-100000}
ops=${LOADGEN_OPS:-50000}
seconds=${LOADGEN_SECONDS:-20}
rounds=${LOADGEN_ROUNDS:-3}
pdpm=$build/src/tools/pdpm
loadgen=$build/src/pdkvs/loadgen/pdkvs-loadgen
source "$(dirname "$0")/kv-bench-cluster.sh"
start_kv_bench_cluster pdkvs-bench

# Requests per second of one redis-benchmark run: a test of its own (-t
# NAME) or a command (its words after the value size).
rps() {  # port pipeline test|- value_size [command...]
  local port=$1 pipeline=$2 test=$3 size=$4
  shift 4
  local what=(-t "$test")
  [[ $test == - ]] && what=("$@")
  redis-benchmark -p "$port" -c 50 -n "$requests" -P "$pipeline" -d "$size" -r 100000 -q \
    "${what[@]}" 2>/dev/null | tr '\r' '\n' |
    awk '/requests per second/ {for (i = 2; i <= NF; i++) if ($(i + 1) == "requests") v = $i}
         END {print v + 0}'
}
# One BENCH line of the gateway's and Redis's figures.
bench_line() {  # name gateway redis what
  local ratio
  ratio=$(awk -v a="$2" -v b="$3" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')
  echo "$4: gateway $2 req/s, redis $3 req/s, ratio $ratio"
  echo "BENCH name=$1 value=$2 unit=req/s ref=redis:$3 ratio=$ratio"
}
for p in 16 1; do
  for t in set get; do
    for d in 64 1024; do
      # The named figures are the 64 B ones; 1 KiB ones carry a suffix.
      name="kv.resp.$t.p$p"
      [[ $d == 1024 ]] && name="$name.1k"
      bench_line "$name" "$(rps "$gport" "$p" "$t" "$d")" "$(rps "$rport" "$p" "$t" "$d")" \
        "kv $t -P $p value ${d} B"
    done
  done
done

# Hashes: HSET of random fields of one hash (redis-benchmark's hset test,
# key myhash), then HGET of such fields (most of them set by then).
bench_line kv.resp.hset.p16 "$(rps "$gport" 16 hset 64)" "$(rps "$rport" 16 hset 64)" \
  "kv hset -P 16 value 64 B"
hget=(HGET myhash element:__rand_int__)
bench_line kv.resp.hget.p16 "$(rps "$gport" 16 - 64 "${hget[@]}")" \
  "$(rps "$rport" 16 - 64 "${hget[@]}")" "kv hget -P 16"

# MSET against pipelined SETs of the same keys, on the gateway.
"$(dirname "$0")/kv-mset-bench.py" "$gport" --sizes 2,100,1000,10000 --bench 1000
"$(dirname "$0")/kv-mset-bench.py" "$gport" --sizes 1000,10000 --repeat-key

[[ $rounds == 0 ]] && exit 0

# pdkvs-loadgen: 50 connections, one request in flight each, one thread;
# every reply verified (a wrong answer fails the benchmark). Rounds run
# interleaved (gateway, Redis, next workload, ...); each figure and each
# reference is the median of its rounds.
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }
workload() {  # port workload distribution
  "$loadgen" --port "$1" --workload "$2" --distribution "$3" --records "$records" --ops "$ops" \
    --duration "${seconds}s" --connections 50 --pipeline 1 --seed 1
}
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
specs=("ycsb-a uniform kv.ycsb.a.uniform" "ycsb-a zipfian kv.ycsb.a.zipf"
  "ycsb-b uniform kv.ycsb.b.uniform" "ycsb-b zipfian kv.ycsb.b.zipf"
  "ycsb-c uniform kv.ycsb.c.uniform" "ycsb-c zipfian kv.ycsb.c.zipf"
  "etc zipfian kv.etc" "sys zipfian kv.sys")
for round in $(seq "$rounds"); do
  for spec in "${specs[@]}"; do
    read -r w dist name <<<"$spec"
    g=$(workload "$gport" "$w" "$dist")
    r=$(workload "$rport" "$w" "$dist")
    field "$g" run_ops_per_s >>"$dir/$name.gateway"
    field "$r" run_ops_per_s >>"$dir/$name.redis"
    echo "kv round $round $w $dist: gateway $(field "$g" run_ops_per_s) ops/s" \
      "(p50 $(field "$g" run_p50_us) us, p99 $(field "$g" run_p99_us) us)," \
      "redis $(field "$r" run_ops_per_s) ops/s" \
      "(p50 $(field "$r" run_p50_us) us, p99 $(field "$r" run_p99_us) us)"
  done
done
for spec in "${specs[@]}"; do
  read -r _ _ name <<<"$spec"
  gv=$(median <"$dir/$name.gateway")
  rv=$(median <"$dir/$name.redis")
  ratio=$(awk -v a="$gv" -v b="$rv" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')
  echo "BENCH name=$name value=$gv unit=ops/s ref=redis:$rv ratio=$ratio"
done
