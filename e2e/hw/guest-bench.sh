#!/bin/sh
# Runs inside the hardware guest with `run.sh --bench`: perftest between two
# processes on rxe0, then verbs_bench with perftest's figures as references
# (same guest, same run). Prints BENCH lines.
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

write_bw=$(perftest ib_write_bw -s 65536 -D "$seconds" | awk '{print $4}') || exit 1
read_bw=$(perftest ib_read_bw -s 65536 -D "$seconds" | awk '{print $4}') || exit 1
# A latency run lands in one of two modes (where the processes run), so
# the reference is the median of five runs, as verbs_bench's figure is of
# five rounds.
lats=""
for run in 1 2 3 4 5; do
  lat=$(perftest ib_write_lat -s 64 -n 2000 | awk '{print $5}') || exit 1
  lats="$lats $lat"
done
write_lat=$(echo $lats | tr ' ' '\n' | sort -g | sed -n 3p)
echo "HW-BENCH ib_write_lat runs:$lats us"
echo "HW-BENCH perftest ib_write_bw=${write_bw}MiB/s ib_read_bw=${read_bw}MiB/s ib_write_lat=${write_lat}us"
bench=$(find "$build" -name verbs_bench -type f -perm -u+x | head -1)
[ -n "$bench" ] || { echo "HW-BENCH FAIL no verbs_bench in $build"; exit 1; }
"$bench" "$host" "$seconds" "$write_bw" "$read_bw" "$write_lat" || {
  echo "HW-BENCH FAIL verbs_bench"
  exit 1
}
