#!/usr/bin/env bash
# End-to-end test of the `pdpm` CLI on a temporary directory: up, status,
# object round trips (binary, empty, several MiB, stdin/stdout), down, up
# again, kill -9 of every daemon then up, a drained server leaving, fsck,
# pDKVS through `pdpm kv` and through the gateway (redis-cli), pDFS volumes
# and a FUSE mount (`pdpm fs`), and the
# errors of bad input; then `up --ha` (three etcd members, three
# monitors), kill -9 of the leader monitor, down and up again. Every step
# checks exit codes and data byte for byte.
#
#   scripts/cluster-cli-test.sh <pdpm binary>
set -euo pipefail
pdpm=${1:?usage: cluster-cli-test.sh <pdpm binary>}

work=$(mktemp -d)
dir=$work/cluster
cleanup() {
  "$pdpm" down --dir "$dir" --timeout 5s >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

step() { echo "--- $*"; }
die() {
  echo "FAIL: $*" >&2
  for log in "$dir"/*.log; do
    [[ -e $log ]] || continue
    echo "--- last lines of $log" >&2
    tail -n 20 "$log" >&2
  done
  exit 1
}
# free_ports N: the first of N consecutive ports that are free now.
free_ports() { "$(dirname "$0")/free-ports" "$1"; }

# expect_fail <exit code> <stderr pattern> <command...>: the command fails
# with that code and its stderr's first line is one "pdpm: ..." line
# matching the pattern.
expect_fail() {
  local want=$1 pattern=$2 rc=0
  shift 2
  "$@" >"$work/out" 2>"$work/err" || rc=$?
  [[ $rc == "$want" ]] || die "$* exited $rc, want $want (stderr: $(cat "$work/err"))"
  head -n1 "$work/err" | grep -Eq "^pdpm: .*$pattern" ||
    die "$*: first stderr line does not match '$pattern': $(cat "$work/err")"
}

# put_get <id> <file>: stores the file (from the file), reads it back to a
# file and to stdout, compares both.
put_get() {
  "$pdpm" obj put "$1" "$2" --dir "$dir"
  "$pdpm" obj get "$1" "$work/back" --dir "$dir"
  cmp "$2" "$work/back" || die "object $1 read back differs from $2"
  "$pdpm" obj get "$1" --dir "$dir" | cmp - "$2" || die "object $1 on stdout differs from $2"
}

check_all() {
  for f in small empty big; do
    "$pdpm" obj get "${ids[$f]}" --dir "$dir" | cmp - "$work/$f" ||
      die "object ${ids[$f]} ($f) lost or changed"
  done
  expect_fail 1 "not_found" "$pdpm" obj get 99 --dir "$dir"
  [[ $("$pdpm" kv get greeting --dir "$dir") == hello ]] || die "key greeting lost or changed"
  "$pdpm" kv get blob --dir "$dir" | cmp - "$work/small" || die "key blob lost or changed"
  [[ $(redis-cli -p "$gateway_port" get counter) == 42 ]] || die "key counter lost or changed"
}

monitor_port=$(free_ports 1)
server_port=$(free_ports 3)
gateway_port=$(free_ports 1)
up_flags=(--dir "$dir" --pm-size 512MiB --segment-size 64MiB --tables 4 --monitor-port "$monitor_port"
          --server-port "$server_port" --gateway-port "$gateway_port" --timeout 20s)

step "bad input before any cluster exists"
expect_fail 2 "unknown command \"frob\"" "$pdpm" frob
expect_fail 2 "no command given" "$pdpm"
expect_fail 1 "no PDPM cluster in" "$pdpm" status --dir "$dir"
expect_fail 1 "no PDPM cluster in" "$pdpm" obj get 1 --dir "$dir"
expect_fail 2 "bad object id \"xyz\"" "$pdpm" obj put xyz --dir "$dir"
expect_fail 2 "bad object id" "$pdpm" obj get 0123456789abcdef0123456789abcdeg --dir "$dir"
expect_fail 2 "unknown obj command \"copy\"" "$pdpm" obj copy 1 --dir "$dir"
expect_fail 2 "unknown flag|--frob" "$pdpm" up --frob 1 --dir "$dir"
expect_fail 2 "--servers must be" "$pdpm" up "${up_flags[@]}" --servers 0
expect_fail 2 "the gateway and server 1 would share port" "$pdpm" up --dir "$dir" \
  --monitor-port "$monitor_port" --server-port "$server_port" --gateway-port "$server_port"
expect_fail 2 "--segment-size must be at least 64MiB" "$pdpm" up --dir "$dir" --segment-size 32MiB
expect_fail 2 "unknown kv command \"frob\"" "$pdpm" kv frob --dir "$dir"
expect_fail 2 "usage: pdpm kv get <key>" "$pdpm" kv get --dir "$dir"
expect_fail 2 "--nx and --xx" "$pdpm" kv put k v --nx --xx --dir "$dir"
expect_fail 1 "no PDPM cluster in" "$pdpm" kv get k --dir "$dir"
"$pdpm" help >/dev/null
"$pdpm" help up | grep -q -- "--pm-size" || die "pdpm help up does not list --pm-size"

step "up fails cleanly when the monitor cannot listen"
python3 -c 'import socket,sys,time
s=socket.socket(); s.bind(("127.0.0.1",int(sys.argv[1]))); s.listen()
open(sys.argv[2],"w").close(); time.sleep(60)' "$monitor_port" "$work/blocking" &
blocker=$!
until [[ -e $work/blocking ]]; do
  kill -0 "$blocker" 2>/dev/null || die "could not occupy port $monitor_port"
  sleep 0.05
done
expect_fail 1 "monitor exited with status 1 while starting; last lines of .*monitor.log" \
  "$pdpm" up "${up_flags[@]}"
grep -q "cannot" "$work/err" || die "the monitor's log tail is missing: $(cat "$work/err")"
kill "$blocker"
wait "$blocker" 2>/dev/null || true
[[ -z $(ls "$dir"/*.pid 2>/dev/null) ]] || die "a failed up left pid files: $(ls "$dir")"

step "up, refuse a second up, status"
"$pdpm" up "${up_flags[@]}" >"$work/up.out"
grep -q "PDPM is up: 3 servers" "$work/up.out" || die "up did not say it is up: $(cat "$work/up.out")"
grep -q "redis-cli -p $gateway_port" "$work/up.out" || die "up names no gateway: $(cat "$work/up.out")"
[[ $(stat -c %a "$dir/cluster.secret") == 600 ]] || die "cluster.secret is not mode 0600"
secret=$(cat "$dir/cluster.secret")
expect_fail 1 "already running in" "$pdpm" up "${up_flags[@]}"
"$pdpm" status --dir "$dir" >"$work/status"
grep -q "^health   OK  (3/3 servers up)" "$work/status" || die "status: $(cat "$work/status")"
[[ $(grep -c " UP " "$work/status") == 3 ]] || die "status lists not 3 UP servers"
# The same cluster through its monitor's address (how it is asked on
# Kubernetes); the local servers register no labels.
"$pdpm" status --monitor "$(cat "$dir/monitor.addr")" >"$work/status-monitor"
diff <(awk '!/^epoch/ { print $1, $2, $3 }' "$work/status") \
  <(awk '!/^epoch/ { print $1, $2, $3 }' "$work/status-monitor") >&2 ||
  die "status --monitor differs from status --dir"
[[ $(grep -Ec " UP .* -$" "$work/status-monitor") == 3 ]] || die "status --monitor labels: $(cat "$work/status-monitor")"

step "object round trips"
head -c 100000 /dev/urandom >"$work/small"
: >"$work/empty"
head -c $((5 * 1024 * 1024 + 17)) /dev/urandom >"$work/big"
declare -A ids=([small]=7 [empty]=18446744073709551615 [big]=00000000000000010000000000000002)
for f in small empty big; do put_get "${ids[$f]}" "$work/$f"; done
# stdin, and overwrite of an existing object
"$pdpm" obj put 8 --dir "$dir" <"$work/big"
"$pdpm" obj put 8 --dir "$dir" <"$work/small"
"$pdpm" obj get 8 --dir "$dir" | cmp - "$work/small" || die "overwrite through stdin"
"$pdpm" obj del 8 --dir "$dir"
expect_fail 1 "not_found" "$pdpm" obj get 8 --dir "$dir"
expect_fail 1 "not_found" "$pdpm" obj del 8 --dir "$dir"
expect_fail 1 "open .*/missing" "$pdpm" obj put 9 "$work/missing" --dir "$dir"
head -c $((64 * 1024 * 1024 + 1)) /dev/zero >"$work/huge"
expect_fail 1 "too_large" "$pdpm" obj put 9 "$work/huge" --dir "$dir"
rm "$work/huge"
expect_fail 2 "usage: pdpm obj del" "$pdpm" obj del 1 extra --dir "$dir"
expect_fail 1 "was created with --servers 3; drop the flag" "$pdpm" up "${up_flags[@]}" --servers 4

step "pDKVS: pdpm kv and the gateway see the same keys"
"$pdpm" kv put greeting hello --dir "$dir"
[[ $("$pdpm" kv get greeting --dir "$dir") == hello ]] || die "kv get greeting"
[[ $(redis-cli -p "$gateway_port" get greeting) == hello ]] || die "redis-cli get greeting"
"$pdpm" kv put blob --dir "$dir" <"$work/small"
"$pdpm" kv get blob --dir "$dir" | cmp - "$work/small" || die "binary value through stdin/stdout"
[[ $(redis-cli -p "$gateway_port" set counter 41) == OK ]] || die "redis-cli set counter"
[[ $(redis-cli -p "$gateway_port" incr counter) == 42 ]] || die "redis-cli incr counter"
expect_fail 1 "already_exists" "$pdpm" kv put greeting other --nx --dir "$dir"
expect_fail 1 "not_found" "$pdpm" kv put absent v --xx --dir "$dir"
"$pdpm" kv put doomed x --dir "$dir"
"$pdpm" kv del doomed --dir "$dir"
expect_fail 1 "not_found" "$pdpm" kv get doomed --dir "$dir"
expect_fail 1 "not_found" "$pdpm" kv del doomed --dir "$dir"
"$pdpm" kv put brief x --ttl 200ms --dir "$dir"
sleep 0.3
expect_fail 1 "not_found" "$pdpm" kv get brief --dir "$dir"
[[ $("$pdpm" kv scan --count 1 --dir "$dir" | sort | tr '\n' ' ') == "blob counter greeting " ]] ||
  die "kv scan: $("$pdpm" kv scan --dir "$dir")"
check_all

step "pDFS: volumes with quotas, a FUSE mount, its errors"
"$pdpm" fs volume create vol1 --bytes 1MiB --inodes 100 --dir "$dir" >/dev/null
expect_fail 1 "already_exists" "$pdpm" fs volume create vol1 --dir "$dir"
expect_fail 2 "bad volume name" "$pdpm" fs volume create a/b --dir "$dir"
[[ $("$pdpm" fs volume list --dir "$dir" | awk '{print $1}') == vol1 ]] || die "fs volume list"
mkdir -p "$work/mnt" "$work/mnt2"
"$pdpm" fs mount vol1 "$work/mnt" --dir "$dir" >/dev/null
if cp "$work/big" "$work/mnt/big" 2>"$work/err"; then die "a file over the quota was written"; fi
grep -q "quota" "$work/err" || die "cp past the quota: $(cat "$work/err")"
"$pdpm" fs volume resize vol1 --bytes 64MiB --dir "$dir" >/dev/null
cp "$work/big" "$work/mnt/big"
mkdir "$work/mnt/sub"
cmp "$work/big" "$work/mnt/big" || die "a file read back through the mount differs"
"$pdpm" fs volume stat vol1 --dir "$dir" >"$work/stat.out"
grep -q "inodes 2/100" "$work/stat.out" || die "fs volume stat: $(cat "$work/stat.out")"
expect_fail 1 "already_exists" "$pdpm" fs mount vol1 "$work/mnt" --dir "$dir"
expect_fail 1 "is mounted on" "$pdpm" fs volume delete vol1 --dir "$dir"
expect_fail 1 "not_found" "$pdpm" fs mount nosuch "$work/mnt2" --dir "$dir"
expect_fail 1 "not_found" "$pdpm" fs umount "$work/mnt2" --dir "$dir"
"$pdpm" fsck --fs --dir "$dir" >"$work/fsck-fs.out" || die "fsck --fs: $(cat "$work/fsck-fs.out")"
grep -q "^clean: pdfs: .* 4 inodes, 3 directories" "$work/fsck-fs.out" ||
  die "fsck --fs: $(cat "$work/fsck-fs.out")"
expect_fail 1 "is mounted on .*pdpm fs umount it first" "$pdpm" fsck --fs --repair --dir "$dir"
expect_fail 2 "--repair works with --fs only" "$pdpm" fsck --repair --dir "$dir"
expect_fail 2 "--server works without --fs only" "$pdpm" fsck --fs --server 1 --dir "$dir"

step "down (unmounts), fsck, up again: data still there"
"$pdpm" down --dir "$dir" >"$work/down.out"
grep -q "^unmounted $work/mnt" "$work/down.out" || die "down did not unmount: $(cat "$work/down.out")"
[[ $(grep -c "^stopped" "$work/down.out") == 6 ]] || die "down: $(cat "$work/down.out")"
[[ -z $(ls "$dir"/*.pid 2>/dev/null) ]] || die "down left pid files"
expect_fail 1 "not running|no PDPM cluster is running" "$pdpm" status --dir "$dir"
expect_fail 1 "no PDPM cluster is running" "$pdpm" obj get 7 --dir "$dir"
"$pdpm" down --dir "$dir" | grep -q "nothing was running" || die "second down"
"$pdpm" fsck --dir "$dir" >"$work/fsck.out" || die "fsck after down: $(cat "$work/fsck.out")"
"$pdpm" up "${up_flags[@]}" >"$work/up.out"
grep -q "recovering its PM" "$work/up.out" || die "up after down reformatted? $(cat "$work/up.out")"
[[ $(cat "$dir/cluster.secret") == "$secret" ]] || die "the secret changed"
check_all
"$pdpm" fs mount vol1 "$work/mnt" --dir "$dir" >/dev/null
cmp "$work/big" "$work/mnt/big" || die "a pDFS file lost or changed across down and up"
"$pdpm" fs umount "$work/mnt" --dir "$dir" >/dev/null
expect_fail 1 "not_found" "$pdpm" fs umount "$work/mnt" --dir "$dir"
"$pdpm" fs volume delete vol1 --dir "$dir" >/dev/null
[[ -z $("$pdpm" fs volume list --dir "$dir") ]] || die "fs volume list after delete"
"$pdpm" fsck --fs --repair --dir "$dir" >"$work/fsck-fs.out" ||
  die "fsck --fs --repair: $(cat "$work/fsck-fs.out")"
grep -q "^clean: pdfs: .* 1 inodes, 1 directories" "$work/fsck-fs.out" ||
  die "fsck --fs after the volume's deletion: $(cat "$work/fsck-fs.out")"
expect_fail 1 "server 1 is running" "$pdpm" fsck --dir "$dir"

step "kill -9 of every daemon, then up: data still there"
for f in "$dir"/*.pid; do kill -9 "$(cat "$f")"; done
for f in "$dir"/*.pid; do
  while kill -0 "$(cat "$f")" 2>/dev/null && ! grep -q '^[^ ]* ([^)]*) Z' "/proc/$(cat "$f")/stat"; do
    sleep 0.05
  done
done
"$pdpm" up "${up_flags[@]}" >"$work/up.out"
check_all
"$pdpm" status --dir "$dir" >/dev/null

step "one server killed: status says so, up refuses a partly running cluster"
kill -9 "$(cat "$dir/server-2.pid")"
# The monitor notices after its suspect timeout (3 s).
for _ in $(seq 200); do
  rc=0
  "$pdpm" status --dir "$dir" >"$work/status" 2>"$work/err" || rc=$?
  [[ $rc == 0 ]] || break
  sleep 0.1
done
[[ $rc == 1 ]] || die "status still healthy 20 s after a server was killed"
grep -Eq "^pdpm: cluster is (DEGRADED|DOWN)" "$work/err" || die "status stderr: $(cat "$work/err")"
grep -Eq " (SUSPECT|DOWN) " "$work/status" || die "status shows no lost server: $(cat "$work/status")"
expect_fail 1 "part of the cluster in .* is running" "$pdpm" up "${up_flags[@]}"
"$pdpm" down --dir "$dir" >/dev/null
"$pdpm" up "${up_flags[@]}" >/dev/null
check_all

step "server drain: the third server leaves, the data stays"
"$pdpm" status --dir "$dir" >"$work/status" 2>/dev/null || die "status: $(cat "$work/status")"
# Cluster ids follow registration order: find the third daemon's.
id=$(awk -v a="$(cat "$dir/server-3.addr")" '$2 == a { print $1 }' "$work/status")
[[ -n $id ]] || die "server-3 not in status: $(cat "$work/status")"
"$pdpm" server drain "$id" --dir "$dir" >"$work/drain.out" || die "drain: $(cat "$work/drain.out")"
grep -q "server $id drained" "$work/drain.out" || die "drain output: $(cat "$work/drain.out")"
"$pdpm" status --dir "$dir" >"$work/status" 2>/dev/null || true
grep -Eq "^$id .* DRAINED " "$work/status" || die "status after drain: $(cat "$work/status")"
kill "$(cat "$dir/server-3.pid")"
check_all
expect_fail 2 "server id \"x\" is not a positive number" "$pdpm" server drain x --dir "$dir"
expect_fail 1 "not_found" "$pdpm" server drain 99 --dir "$dir"

step "down"
"$pdpm" down --dir "$dir" >/dev/null
"$pdpm" fsck --dir "$dir" >"$work/fsck.out" || die "fsck after kill -9: $(cat "$work/fsck.out")"

step "up --ha: three etcd members, three monitors, the status names the leader"
dir=$work/ha
ha_monitor_port=$(free_ports 3)
ha_flags=(--dir "$dir" --ha --pm-size 512MiB --segment-size 64MiB --tables 4
          --monitor-port "$ha_monitor_port" --server-port "$(free_ports 3)"
          --etcd-port "$(free_ports 6)" --gateway-port "$(free_ports 1)" --timeout 60s)
"$pdpm" up "${ha_flags[@]}" >"$work/up.out" || die "up --ha: $(cat "$work/up.out")"
grep -q "monitors at .*,.*,.* (view in etcd)" "$work/up.out" || die "up --ha: $(cat "$work/up.out")"
[[ $(ls "$dir"/etcd-*.pid "$dir"/monitor-*.pid | wc -l) == 6 ]] || die "not 3 etcd + 3 monitors"
leader_of() {
  "$pdpm" status --dir "$dir" >"$work/status" || return 1
  sed -n 's/^monitors .* leader \([^ ]*\) .*/\1/p' "$work/status"
}
leader=$(leader_of) || die "status --ha: $(cat "$work/status")"
[[ -n $leader ]] || die "status names no leader: $(cat "$work/status")"
put_get 7 "$work/small"
put_get 8 "$work/big"

step "kill -9 the leader monitor: a standby leads, objects still served and stored"
i=${leader##*:}
i=$((i - ha_monitor_port + 1))
kill -9 "$(cat "$dir/monitor-$i.pid")"
for _ in $(seq 300); do
  now=$(leader_of 2>/dev/null) || now=""
  [[ -n $now && $now != "$leader" ]] && break
  sleep 0.1
done
[[ -n $now && $now != "$leader" ]] || die "no new leader 30 s after killing $leader"
"$pdpm" obj get 7 --dir "$dir" | cmp - "$work/small" || die "object 7 after the failover"
put_get 9 "$work/small"
"$pdpm" kv put after-failover yes --dir "$dir"

step "down, up again on the same directory: the HA cluster comes back with its data"
"$pdpm" down --dir "$dir" >"$work/down.out"
[[ $(grep -c "^stopped" "$work/down.out") == 10 ]] || die "down --ha: $(cat "$work/down.out")"
"$pdpm" up --dir "$dir" --timeout 60s >"$work/up.out" || die "up again: $(cat "$work/up.out")"
grep -q "(view in etcd)" "$work/up.out" || die "up again is not HA: $(cat "$work/up.out")"
for id in 7 9; do
  "$pdpm" obj get $id --dir "$dir" | cmp - "$work/small" || die "object $id after up again"
done
"$pdpm" obj get 8 --dir "$dir" | cmp - "$work/big" || die "object 8 after up again"
[[ $("$pdpm" kv get after-failover --dir "$dir") == yes ]] || die "key after-failover lost"
"$pdpm" down --dir "$dir" >/dev/null
echo "PASS"
