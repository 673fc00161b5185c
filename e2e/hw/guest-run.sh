#!/bin/sh
# Runs inside the hardware guest (started by guest-stub-init as PID 1's
# child): sets up soft-RoCE on a dummy interface and, on the emulated
# NVDIMM, an fsdax namespace (ext4 -o dax) and four devdax ones (one for
# the PM suite, one per cluster server), then runs the plan the host wrote
# (/run/pdpm/plan: "<label> <binary> <working-dir> <gtest-filter>" lines)
# and prints one HW-RESULT line per binary on the serial console.
set -u
run=/run/pdpm
host_ip=10.77.0.1
mkdir -p "$run"
mount -t 9p -o trans=virtio,version=9p2000.L,ro pdpmrun "$run" || {
  echo "HW-SETUP FAIL cannot mount the run share"
  exit 2
}
step() { # step <what> <command...>: runs it, reports failures loudly
  what=$1
  shift
  if ! out=$("$@" 2>&1); then
    echo "HW-SETUP FAIL $what: $out"
    exit 2
  fi
}

ulimit -l unlimited
ip link set lo up
step "dummy module" modprobe dummy numdummies=0
step "dummy0" ip link add dummy0 type dummy
step "dummy0 address" ip addr add "$host_ip/24" dev dummy0
step "dummy0 up" ip link set dummy0 up
for m in ib_uverbs rdma_ucm rdma_rxe; do step "module $m" modprobe "$m"; done
step "rxe0" rdma link add rxe0 type rxe netdev dummy0
i=0
until grep -qs ACTIVE /sys/class/infiniband/rxe0/ports/1/state; do
  i=$((i + 1))
  [ $i -gt 100 ] && { echo "HW-SETUP FAIL rxe0 port never became active"; exit 2; }
  sleep 0.1
done

for m in nfit nd_pmem nd_btt dax_pmem device_dax; do modprobe "$m" 2>/dev/null; done
step "disable regions" ndctl disable-region all
step "init labels" ndctl init-labels -f all
step "enable regions" ndctl enable-region all
fsdax_json=$(ndctl create-namespace -m fsdax -s 256M 2>&1) || {
  echo "HW-SETUP FAIL fsdax namespace: $fsdax_json"
  exit 2
}
pmem=/dev/$(echo "$fsdax_json" | sed -n 's/.*"blockdev":"\([^"]*\)".*/\1/p' | head -1)
[ -b "$pmem" ] || { echo "HW-SETUP FAIL fsdax namespace without a device: $fsdax_json"; exit 2; }
# devdax <size>: a new devdax namespace; prints its /dev/daxN.M.
devdax() {
  json=$(ndctl create-namespace -m devdax -s "$1" 2>&1) || {
    echo "HW-SETUP FAIL devdax namespace: $json" >&2
    return 1
  }
  dev=/dev/$(echo "$json" | sed -n 's/.*"chardev":"\([^"]*\)".*/\1/p' | head -1)
  [ -c "$dev" ] || { echo "HW-SETUP FAIL devdax namespace without a device: $json" >&2; return 1; }
  echo "$dev"
}
dax=$(devdax 256M) || exit 2
# A cluster server's PM holds two 128 MiB segments and the superblock
# area; devdax keeps some of a namespace for its page structures.
server_pm=
for i in 0 1 2; do
  dev=$(devdax 320M) || exit 2
  server_pm=${server_pm:+$server_pm,}$dev
done
step "mkfs on $pmem" mkfs.ext4 -q -F -b 4096 "$pmem"
mkdir -p /mnt/pmem
step "mount -o dax" mount -o dax "$pmem" /mnt/pmem
clock=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)
scale=$(cat "$run/timeout-scale")
repeat=$(cat "$run/repeat")
echo "HW-SETUP OK rxe0 on dummy0 $host_ip, devdax $dax, fsdax $pmem on /mnt/pmem," \
  "servers on $server_pm, clock $clock, timeouts x$scale"

export HOME=/tmp TMPDIR=/tmp
export PDPM_TEST_TRANSPORT=verbs PDPM_TEST_HOST=$host_ip
export PDPM_TEST_DEVDAX=$dax PDPM_TEST_FSDAX_DIR=/mnt/pmem PDPM_TEST_SERVER_PM=$server_pm
export PDPM_TEST_TIMEOUT_SCALE=$scale
# read_state <pid>: sets `state` to the process's state letter (R, S, D,
# Z, ...), empty once it is gone. No fork (slow emulated): the shell's own
# `read`.
read_state() {
  state= line=
  read -r line <"/proc/$1/stat" 2>/dev/null || return 0
  set -- ${line##*) }
  state=$1
}
# read_uptime: sets `now` to the whole seconds since boot, without a fork.
read_uptime() {
  read -r now _ </proc/uptime
  now=${now%.*}
}
# live_in_session <sid>: the session's processes that still hold anything
# (every one but zombies), one "pid stat elapsed command" line each.
live_in_session() {
  ps -o pid=,stat=,etime=,args= -s "$1" 2>/dev/null | awk '$2 !~ /^Z/'
}
# end_session <sid> <what>: kills (SIGKILL) every process of the session
# and waits until all are gone, so their PM devices and ports are free for
# the next binary. Fails, saying which, if one outlives a minute (stuck in
# the kernel).
end_session() {
  i=0
  while left=$(live_in_session "$1") && [ -n "$left" ]; do
    for p in $(echo "$left" | awk '{print $1}'); do kill -9 "$p" 2>/dev/null; done
    i=$((i + 1))
    if [ $i -gt 600 ]; then
      echo "  | $2: processes that SIGKILL did not end in 60 s:"
      echo "$left" | sed 's/^/  |   /'
      return 1
    fi
    sleep 0.1
  done
}

status=0
while read -r label binary workdir binary_timeout filter; do
  [ -n "$label" ] || continue
  name=$(basename "$binary")
  echo "HW-RUN $label $name $filter"
  start=$(date +%s)
  [ -s "$run/filter" ] && filter=$(cat "$run/filter")
  # Its own session (setsid does not fork: a background job of this shell
  # leads no group), so every process it starts, however it ends, is
  # found and ended with it.
  cd "$workdir" || { echo "HW-RESULT $label $name FAIL no directory $workdir"; status=1; continue; }
  # The kernel's log from here on is this binary's (read on failure).
  dmesg -C 2>/dev/null
  setsid "$binary" "--gtest_filter=$filter" "--gtest_repeat=$repeat" >/tmp/out 2>&1 &
  pid=$!
  cd /
  # The deadline in seconds of uptime (read without a fork): emulated, a
  # `sleep 0.1` takes far longer than 0.1 s, so counting them let a hung
  # binary outlive its timeout several times over.
  read_uptime
  deadline=$((now + binary_timeout * repeat))
  hung=
  read_state "$pid"
  while [ -n "$state" ] && [ "$state" != Z ]; do
    read_uptime
    [ "$now" -ge $deadline ] && { hung=1; break; }
    sleep 0.1
    read_state "$pid"
  done
  stacks=
  if [ -n "$hung" ]; then
    # Hung: where every process of the binary stands, before it is killed.
    stacks=/tmp/stacks
    {
      echo "timed out after $((binary_timeout * repeat))s; its processes:"
      live_in_session "$pid"
      for p in $(live_in_session "$pid" | awk '{print $1}'); do
        echo "--- stacks of $(ps -o pid=,args= -p "$p")"
        gdb -batch -nx -p "$p" -ex 'thread apply all bt' 2>&1 | grep -E '^(Thread|#)'
      done
    } >"$stacks" 2>&1
  fi
  # A binary that exited leaves nothing behind either (its servers, when
  # it crashed before its destructors ran): what still runs 10 s later
  # (the last killed ones may take a while to exit) fails it.
  left=
  if [ -z "$stacks" ]; then
    i=0
    while left=$(live_in_session "$pid") && [ -n "$left" ] && [ $i -lt 100 ]; do
      sleep 0.1
      i=$((i + 1))
    done
  fi
  end_session "$pid" "$name" || status=1
  wait "$pid"
  rc=$?
  [ -n "$stacks" ] && rc=124
  if [ $rc -eq 0 ] && [ -n "$left" ]; then
    echo "  | $name exited but left these processes running (killed):"
    echo "$left" | sed 's/^/  |   /'
    rc=125
  fi
  took=$(($(date +%s) - start))
  # Failures, skips, the summary and the passing cases that took a second
  # or more; of a failed binary also every start (a hang shows where).
  awk -v failed=$((rc != 0)) '
    /^\[----------\]/ || /^$/ { next }
    /^\[ RUN      \]/ { if (failed) print; next }
    /^\[       OK \]/ { ms = $0; sub(/.*\(/, "", ms); if (failed || ms + 0 >= 1000) print; next }
    { print }' /tmp/out | sed 's/^/  | /' | tail -1500
  if [ $rc -eq 0 ]; then
    echo "HW-RESULT $label $name PASS ${took}s"
  else
    # A process the kernel ended (out of memory, a fault) leaves no line in
    # its own log: a server that vanished mid-test shows here.
    dmesg 2>/dev/null | grep -iE 'out of memory|oom-kill|killed process|segfault|general protection|trap' |
      tail -20 | sed 's/^/  | kernel: /'
    if [ -n "$stacks" ]; then
      sed 's/^/  | /' "$stacks" | tail -3000
      # The logs of the clusters it left say where the servers stood.
      for log in /dev/shm/pdpm-cluster-*/*.log /tmp/pdpm-cluster-*/*.log; do
        [ -f "$log" ] || continue
        echo "--- $log"
        tail -c 3000 "$log"
      done | sed 's/^/  | /'
    fi
    rm -rf /dev/shm/pdpm-cluster-* /tmp/pdpm-cluster-*
    echo "HW-RESULT $label $name FAIL rc=$rc ${took}s"
    status=1
  fi
done <"$run/plan"

if [ -x "$run/bench.sh" ]; then
  "$run/bench.sh" "$host_ip" || status=1
fi
exit $status
