#!/bin/sh
# Runs inside the hardware guest with `run.sh --bench`: perftest between two
# processes on rxe0 and verbs_bench, whose figures have perftest's as
# references (same guest, same run). Prints BENCH lines.
set -u
host=$1
build=$(cat /run/pdpm/bench-build)
seconds=${PDPM_BENCH_SECONDS:-4}

# perftest <tool> <args...>: server and client on rxe0 (GID 1); prints the
# client's result line (the one starting with the message size).
perftest() {
  tool=$1
  shift
  "$tool" -d rxe0 -x 1 -F "$@" >/tmp/perf-server.log 2>&1 &
  server=$!
  sleep 1
  "$tool" -d rxe0 -x 1 -F "$@" "$host" >/tmp/perf-client.log 2>&1
  rc=$?
  wait $server
  if [ $rc -ne 0 ]; then
    echo "HW-BENCH FAIL $tool: $(tail -3 /tmp/perf-client.log)" >&2
    return 1
  fi
  grep -E '^ *[0-9]+ +[0-9]+ ' /tmp/perf-client.log | tail -1
}

bench=$(find "$build" -name verbs_bench -type f -perm -u+x | head -1)
[ -n "$bench" ] || { echo "HW-BENCH FAIL no verbs_bench in $build"; exit 1; }
write_bw=$(perftest ib_write_bw -s 65536 -D "$seconds" | awk '{print $4}') || exit 1
read_bw=$(perftest ib_read_bw -s 65536 -D "$seconds" | awk '{print $4}') || exit 1
echo "HW-BENCH perftest ib_write_bw=${write_bw}MiB/s ib_read_bw=${read_bw}MiB/s"
"$bench" bw "$host" "$seconds" "$write_bw" "$read_bw" || {
  echo "HW-BENCH FAIL verbs_bench bw"
  exit 1
}
# A latency run lands in one of two modes (where the processes run) and
# the host's load moves both programs alike: five perftest runs and five
# rounds of ours (a fresh server process and connection each), taken in
# turns, and the medians compared.
lats=""
p50s=""
for run in 1 2 3 4 5; do
  lat=$(perftest ib_write_lat -s 64 -n 2000 | awk '{print $5}') || exit 1
  p50=$("$bench" rpc "$host" "$(echo "$seconds" | awk '{print $1 / 2}')") || {
    echo "HW-BENCH FAIL verbs_bench rpc"
    exit 1
  }
  lats="$lats${lats:+,}$lat"
  p50s="$p50s${p50s:+,}$p50"
done
"$bench" rpc-report "$p50s" "$lats" || {
  echo "HW-BENCH FAIL verbs_bench rpc-report"
  exit 1
}
