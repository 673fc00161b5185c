# Sourced by the pDKVS benchmark scripts: starts redis-server and a local
# cluster with a gateway (`pdpm up`, three servers, --replicas 2) on PM
# files under $PDPM_BENCH_PM_DIR (default /dev/shm), both torn down when
# the script exits. Needs $pdpm; sets dir, rport (Redis), gport (gateway).
#   start_kv_bench_cluster NAME
free_ports() { "$(dirname "${BASH_SOURCE[0]}")/free-ports" "$1"; }
start_kv_bench_cluster() {
  dir=$(mktemp -d "${PDPM_BENCH_PM_DIR:-/dev/shm}/$1.XXXXXX")
  rport=$(free_ports 1)
  redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >/dev/null &
  rpid=$!
  trap '"$pdpm" down --dir "$dir/cluster" >/dev/null 2>&1 || true; kill $rpid 2>/dev/null || true
        wait 2>/dev/null || true; rm -rf "$dir"' EXIT
  # 128 MiB segments: 23 a server, room for 16 tables' two copies and the
  # logs (with 256 MiB ones, 11 a server, the last tables found no free
  # segment on their server).
  "$pdpm" up --dir "$dir/cluster" --replicas 2 --pm-size 3GiB --segment-size 128MiB \
    --monitor-port "$(free_ports 1)" --server-port "$(free_ports 3)" \
    --gateway-port "$(free_ports 1)" --timeout 60s >/dev/null
  gport=$(sed 's/.*://' "$dir/cluster/gateway.addr")
  for _ in $(seq 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.05; done
}
