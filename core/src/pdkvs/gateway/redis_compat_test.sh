#!/usr/bin/env bash
# ctest entry of the Redis comparison (redis_compat_test.py): redis-py in a
# cached venv, a redis-server 7 on a free loopback port without persistence,
# a PM file in memory. usage: redis_compat_test.sh PDKVS_GATEWAY_BINARY
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
gateway=$1
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
trap 'kill $redis_pid 2>/dev/null || true; wait $redis_pid 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
"$venv/bin/python" "$here/redis_compat_test.py" "$gateway" "$dir/kv.pm" "$port"
