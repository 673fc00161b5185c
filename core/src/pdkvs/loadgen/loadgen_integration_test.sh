#!/usr/bin/env bash
# ctest pdkvs_loadgen_integration: pdkvs-loadgen runs every workload against
# a real pdkvs-gateway (local store on a PM file in memory) and a real
# redis-server 7, verifying every reply; then answers tampered with through
# the server (a foreign value, another key's value, a flipped byte, a
# deleted key) must make it fail, naming the key, and so must a server that
# stops answering.
# usage: loadgen_integration_test.sh PDKVS_LOADGEN PDKVS_GATEWAY
set -euo pipefail
loadgen=$1
gateway=$2
dir=$(mktemp -d "${PDPM_TEST_PM_DIR:-/dev/shm}/pdkvs-loadgen.XXXXXX")
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
  >"$dir/redis.log" 2>&1 &
rpid=$!
coproc GW { exec "$gateway" --listen 127.0.0.1:0 --pm "$dir/kv.pm" --pm-size 512MiB 2>"$dir/gw.log"; }
gpid=$GW_PID
trap 'kill -CONT $rpid 2>/dev/null || true; kill $rpid $gpid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
read -r line <&"${GW[0]}"
gport=${line#port=}
for _ in $(seq 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.05; done

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
field() { # output name
  tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"
}

# Every workload and key choice against both servers: all operations run
# and every reply is right.
for target in "gateway $gport" "redis $rport"; do
  read -r name port <<<"$target"
  for w in ycsb-a ycsb-b ycsb-c etc sys; do
    for dist in uniform zipfian; do
      out=$("$loadgen" --port "$port" --workload "$w" --distribution "$dist" --records 2000 \
        --ops 4000 --connections 4 --pipeline 8 --threads 2 --duration 60s --seed 7) ||
        fail "$w $dist against $name"
      echo "$name: $out"
      [[ $(field "$out" run_ops) == 4000 && $(field "$out" load_ops) == 2000 ]] ||
        fail "$w $dist against $name did not run every operation"
    done
  done
done

# A fixed seed gives the same operation stream (one connection: the same
# reads and writes in the same order).
a=$("$loadgen" --port "$gport" --workload ycsb-a --records 500 --ops 3000 --connections 1 --seed 3)
b=$("$loadgen" --port "$gport" --workload ycsb-a --records 500 --ops 3000 --connections 1 --seed 3)
c=$("$loadgen" --port "$gport" --workload ycsb-a --records 500 --ops 3000 --connections 1 --seed 4)
[[ $(field "$a" run_reads) == $(field "$b" run_reads) ]] || fail "seed 3 twice: $a / $b"
[[ $(field "$a" run_reads) != $(field "$c" run_reads) ]] || fail "seeds 3 and 4 alike: $a / $c"

# The time bound ends a run whose operation count is out of reach: it stops
# after at least its second with fewer operations than asked (no upper bound
# on its wall time: a loaded machine may stretch it).
out=$("$loadgen" --port "$gport" --workload ycsb-b --records 500 --ops 1000000000 \
  --connections 2 --duration 1s)
awk -v s="$(field "$out" run_seconds)" -v n="$(field "$out" run_ops)" \
  'BEGIN {exit !(s >= 1 && n < 1000000000)}' ||
  fail "--duration 1s: $out"

# Wrong answers: while a read-only run reads 20 keys over and over, the
# server's data is changed behind its back; the run must fail and say why.
# (One thread loads the records in order, so record i is write i.)
key() { printf 'user%019d' "$1"; }
tamper_run() { # port expected-message tamper-command...
  local port=$1 expect=$2
  shift 2
  "$loadgen" --port "$port" --workload ycsb-c --distribution uniform --records 20 \
    --ops 1000000000 --duration 20s --connections 2 >"$dir/out" 2>"$dir/err" &
  local pid=$!
  # Keep tampering until the run ends: its load phase may come after the
  # first attempt and rewrite every key.
  while kill -0 "$pid" 2>/dev/null; do
    "$@" >/dev/null 2>&1 || true
    sleep 0.2
  done
  if wait "$pid"; then fail "run against port $port did not notice: $expect"; fi
  grep -q -- "$expect" "$dir/err" || fail "expected '$expect', got: $(cat "$dir/err")"
  echo "detected: $(head -1 "$dir/err")"
}
copy_value() { # port from-key to-key [flip]
  redis-cli -p "$1" --raw GET "$2" | head -c -1 >"$dir/value"
  if [[ ${4:-} == flip ]]; then
    python3 -c 'import sys; p=sys.argv[1]; b=bytearray(open(p,"rb").read()); b[-1]^=1; open(p,"wb").write(b)' "$dir/value"
  fi
  redis-cli -p "$1" -x SET "$3" <"$dir/value"
}
for port in "$gport" "$rport"; do
  tamper_run "$port" "$(key 5): a value of 7 bytes that no write sent" \
    redis-cli -p "$port" SET "$(key 5)" garbage
  tamper_run "$port" "$(key 6): absent" redis-cli -p "$port" DEL "$(key 6)"
  tamper_run "$port" "$(key 7): the value of write 8, which went to $(key 8)" \
    copy_value "$port" "$(key 8)" "$(key 7)"
  tamper_run "$port" "$(key 9): the value of write 9 with wrong bytes" \
    copy_value "$port" "$(key 9)" "$(key 9)" flip
done

# A server that stops answering (redis-server stopped with SIGSTOP: the
# kernel still accepts connections) fails the run after 10 s.
kill -STOP "$rpid"
if "$loadgen" --port "$rport" --workload etc --records 100 --connections 2 2>"$dir/err"; then
  kill -CONT "$rpid"
  fail "a stopped server did not fail the run"
fi
kill -CONT "$rpid"
grep -q "sent nothing for 10 s" "$dir/err" || fail "stopped server: $(cat "$dir/err")"
echo "detected: $(cat "$dir/err")"
echo "pdkvs-loadgen integration: PASS"
