#!/usr/bin/env bash
# ctest entry of the Redis comparison (redis_compat_test.py): redis-py in a
# cached venv, a redis-server 7 on a free loopback port without persistence,
# and the gateway on a local store on a PM file in memory or, given the
# pdpm CLI, on a local PDPM cluster it starts (three servers, two copies).
# usage: redis_compat_test.sh PDKVS_GATEWAY_BINARY [PDPM_BINARY]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
gateway=$1
pdpm=${2:-}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/pdpm
venv=$cache/redis-py-venv
if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import redis' 2>/dev/null; then
  mkdir -p "$cache"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'redis>=5,<6'
fi
dir=$(mktemp -d "${PDPM_TEST_PM_DIR:-/dev/shm}/pdkvs-compat.XXXXXX")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
  >"$dir/redis.log" 2>&1 &
redis_pid=$!
cleanup() {
  [[ -n $pdpm ]] && "$pdpm" down --dir "$dir/cluster" --timeout 5s >/dev/null 2>&1
  kill $redis_pid 2>/dev/null || true
  wait $redis_pid 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
store=(--pm "$dir/kv.pm" --pm-size 256MiB)
if [[ -n $pdpm ]]; then
  # free_ports N: the first of N consecutive ports that are free now.
  free_ports() { "$here/../../../../scripts/free-ports" "$1"; }
  "$pdpm" up --dir "$dir/cluster" --pm-size 512MiB --segment-size 64MiB --tables 8 \
    --monitor-port "$(free_ports 1)" --server-port "$(free_ports 3)" --gateway-port 0 \
    --timeout 60s >"$dir/up.log" 2>&1 || { cat "$dir/up.log"; exit 1; }
  store=(--monitor "$(cat "$dir/cluster/monitor.addr")" --secret-file "$dir/cluster/cluster.secret")
  export PDKVS_TEST_CLUSTER_DIR=$dir/cluster  # the script kills a server of it
fi
"$venv/bin/python" "$here/redis_compat_test.py" "$gateway" "$port" "${store[@]}"
