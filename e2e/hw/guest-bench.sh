#!/bin/sh
# Runs inside the hardware guest with `run.sh --bench`: perftest between two
# processes on rxe0 and verbs_bench, whose figures have perftest's as
# references (same guest, same run). Prints BENCH lines.
set -u
host=$1
build=$(cat /run/pdpm/bench-build)
seconds=${PDPM_BENCH_SECONDS:-4}

# Latency runs pin the client to CPU 0 and the server to CPU 1, perftest's
# and ours alike, so the scheduler's placement is the same for both.
client_cpu=0
server_cpu=1

# on_cpu <cpu|-> <command...>: runs it pinned to the CPU, or where it lands.
on_cpu() {
  cpu=$1
  shift
  if [ "$cpu" = - ]; then "$@"; else taskset -c "$cpu" "$@"; fi
}

# perftest <server cpu|-> <client cpu|-> <tool> <args...>: server and
# client on rxe0 (GID 1); prints the client's result line (the one
# starting with the message size).
perftest() {
  pin_server=$1
  pin_client=$2
  tool=$3
  shift 3
  on_cpu "$pin_server" "$tool" -d rxe0 -x 1 -F "$@" >/tmp/perf-server.log 2>&1 &
  server=$!
  sleep 1
  on_cpu "$pin_client" "$tool" -d rxe0 -x 1 -F "$@" "$host" >/tmp/perf-client.log 2>&1
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
write_bw=$(perftest - - ib_write_bw -s 65536 -D "$seconds" | awk '{print $4}') || exit 1
read_bw=$(perftest - - ib_read_bw -s 65536 -D "$seconds" | awk '{print $4}') || exit 1
echo "HW-BENCH perftest ib_write_bw=${write_bw}MiB/s ib_read_bw=${read_bw}MiB/s"
"$bench" bw "$host" "$seconds" "$write_bw" "$read_bw" || {
  echo "HW-BENCH FAIL verbs_bench bw"
  exit 1
}
# A latency run lands in one of two modes (about 20 or 40 us one way for
# perftest, even pinned) and the host's load moves both programs alike:
# five perftest runs and five rounds of ours (a fresh server process and
# connection each), taken in turns, and each program's best compared.
lats=""
p50s=""
for run in 1 2 3 4 5; do
  lat=$(perftest $server_cpu $client_cpu ib_write_lat -s 64 -n 2000 | awk '{print $5}') || exit 1
  p50=$("$bench" rpc "$host" "$(echo "$seconds" | awk '{print $1 / 2}')" $client_cpu $server_cpu) || {
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
