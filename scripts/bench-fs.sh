#!/usr/bin/env bash
# make bench-fs: pDFS (docs/pdfs.md) against its references, all measured
# in this run on this host:
#   tmpfs        the local-memory ceiling (a directory of /dev/shm);
#   passthrough  libfuse's passthrough_ll example (from Debian's libfuse3-dev)
#                serving a tmpfs directory: the ceiling of any FUSE file
#                system;
#   glusterfs    GlusterFS, one volume replica 2 on two tmpfs bricks, mounted
#                with its FUSE client; glusterd runs in a network namespace of
#                its own with its own address (it refuses loopback bricks);
#   pdfs         pdfs-fuse mounting a volume of a local cluster (`pdpm up`:
#                three servers on PM files in /dev/shm, every segment on two,
#                three tables of 512 MiB).
# On each mount: fio (1 MiB sequential write then read, bandwidth; 4 KiB
# random write then read, IOPS; 1 and 4 jobs, each on its own file) and
# pdfs_bench meta (create, stat, readdir, unlink, mkdir, rmdir; many files in
# one directory, and spread over ten). Through pDFSLib without FUSE:
# pdfs_bench data and meta, against the tcp transport's raw one-sided
# bandwidth (net_bench, same run) too.
#
# Prints every figure with its references and ratios, every goal of issue
# 17 (met or not), and BENCH lines: `name value unit ref=glusterfs:<v>
# ratio=<to glusterfs>`, and `<name>.tmpfs` / `<name>.passthrough` (and for
# pDFSLib's data `<name>.tcp`) with the ratio to that reference. With
# FS_PROFILE=1 (default) each missed goal's pDFS figure runs once more under
# `perf record -g` of pdfs-fuse (or pdfs_bench) and the servers, and the
# top of the profile is printed. The load average at start and end is
# printed: on this shared 2-core host compare the references' absolute
# figures with a quiet run (FS_TARGETS="tmpfs passthrough glusterfs") before
# trusting ratios.
#
# Everything started here (mounts, glusterd and its bricks, the network
# namespace, the cluster) is torn down on exit and on failure. Needs root
# (mounts, network namespace) and `scripts/deps.sh bench`.
#   scripts/bench-fs.sh BUILD_DIR
# env: FS_TARGETS (default "pdfs tmpfs passthrough glusterfs"), FS_SEQ_BYTES
# (per job, default 64MiB), FS_RAND_BYTES (per job, default 32MiB),
# FS_FILES (names per metadata operation, default 1000), FS_DIRS (spread
# layout, default 10), FS_SECONDS (most seconds of one create, mkdir or
# random I/O run, default 20), FS_PROFILE (1 or 0)
set -euo pipefail
build=${1:?usage: bench-fs.sh BUILD_DIR}
targets=${FS_TARGETS:-pdfs tmpfs passthrough glusterfs}
seq_bytes=${FS_SEQ_BYTES:-64MiB}
rand_bytes=${FS_RAND_BYTES:-32MiB}
files=${FS_FILES:-1000}
dirs=${FS_DIRS:-10}
seconds=${FS_SECONDS:-20}
profile=${FS_PROFILE:-1}
pdpm=$build/src/tools/pdpm
bench=$build/src/pdfs/bench/pdfs_bench
net_bench=$build/src/net/net_bench
passthrough_src=/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c
for f in "$pdpm" "$bench" "$net_bench"; do
  [[ -x $f ]] || { echo "bench-fs: $f not built" >&2; exit 1; }
done
for tool in fio glusterd gluster ip nsenter perf jq cc pkg-config fusermount3; do
  command -v "$tool" >/dev/null || { echo "bench-fs: $tool missing (scripts/deps.sh bench)" >&2; exit 1; }
done
[[ -r $passthrough_src ]] || { echo "bench-fs: $passthrough_src missing (libfuse3-dev)" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "bench-fs: needs root (mounts, a network namespace)" >&2; exit 1; }
shm=/dev/shm
[[ $(stat -f -c %T "$shm") == tmpfs ]] || { echo "bench-fs: $shm is not a tmpfs" >&2; exit 1; }

work=$(mktemp -d "$shm/pdpm-bench-fs.XXXXXX")
netns=pdpm-bench-fs-$$
gl_addr=10.213.0.1
gl_volume=pdpmbench$$
passthrough_pid=
mounts=()
# Everything this run started, undone in reverse order; a step that fails
# does not stop the rest.
cleanup() {
  local rc=$?
  set +e
  # A failed run shows why: the end of pdfs-fuse's and the daemons' logs.
  if [[ $rc != 0 && -d $work/cluster ]]; then
    for log in "$work"/cluster/fs/*.log "$work"/cluster/*.log; do
      [[ -s $log ]] || continue
      echo "--- last lines of $(basename "$log")" >&2
      tail -n 15 "$log" >&2
    done
  fi
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    mountpoint -q "${mounts[i]}" && umount "${mounts[i]}" 2>/dev/null
    mountpoint -q "${mounts[i]}" && umount -l "${mounts[i]}"
  done
  [[ -n $passthrough_pid ]] && { kill "$passthrough_pid" 2>/dev/null; wait "$passthrough_pid" 2>/dev/null; }
  [[ -d $work/cluster ]] && "$pdpm" down --dir "$work/cluster" >/dev/null 2>&1
  if ip netns list | grep -qw "$netns"; then
    # glusterd, the brick processes and the self-heal daemon: every process
    # of the namespace is ours. Their sockets and pid files outside $work
    # are named on their command lines.
    local pids
    pids=$(ip netns pids "$netns")
    for p in $pids; do
      tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | grep -A1 -x -e -S -e -p | grep '^/var/run/gluster/' >>"$work/gluster-files"
    done
    [[ -n $pids ]] && kill $pids 2>/dev/null
    for _ in $(seq 50); do [[ -z $(ip netns pids "$netns") ]] && break; sleep 0.1; done
    pids=$(ip netns pids "$netns")
    [[ -n $pids ]] && kill -9 $pids 2>/dev/null
    ip netns del "$netns"
    [[ -f $work/gluster-files ]] && xargs -r rm -f <"$work/gluster-files"
    rm -rf "/var/run/gluster/vols/$gl_volume" "/var/run/gluster/shd/$gl_volume"
    rm -f /var/log/glusterfs/bricks/"$(tr / - <<<"${work#/}")"-gl-brick*.log
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_ports() { "$(dirname "$0")/free-ports" "$1"; }
wait_mounted() {  # dir what
  for _ in $(seq 200); do mountpoint -q "$1" && return 0; sleep 0.05; done
  echo "bench-fs: $2 did not mount on $1" >&2
  return 1
}
read -r load_start _ </proc/loadavg
echo "bench-fs: load average $load_start at the start ($(nproc) cores)"

# Mount points: $work/<target>/mnt, where every target's figures are taken.
declare -A dir
has() { [[ " $targets " == *" $1 "* ]]; }
if has tmpfs; then
  mkdir -p "$work/tmpfs/mnt"
  dir[tmpfs]=$work/tmpfs/mnt
fi
if has passthrough; then
  mkdir -p "$work/passthrough/src" "$work/passthrough/mnt"
  # shellcheck disable=SC2046
  cc -O2 -o "$work/passthrough/passthrough_ll" "$passthrough_src" $(pkg-config --cflags --libs fuse3)
  "$work/passthrough/passthrough_ll" -f -o "source=$work/passthrough/src" "$work/passthrough/mnt" \
    2>"$work/passthrough/log" &
  passthrough_pid=$!
  mounts+=("$work/passthrough/mnt")
  wait_mounted "$work/passthrough/mnt" passthrough_ll
  dir[passthrough]=$work/passthrough/mnt
fi
if has glusterfs; then
  gl=$work/gl
  mkdir -p "$gl/wd" "$gl/brick1" "$gl/brick2" "$gl/mnt" "$gl/log"
  ip netns add "$netns"
  ip -n "$netns" link set lo up
  ip -n "$netns" addr add "$gl_addr/32" dev lo
  in_ns() { nsenter --net="/run/netns/$netns" "$@"; }
  # Debian's glusterd.vol with the working directory and CLI socket in $work.
  sed -e "s|option working-directory .*|option working-directory $gl/wd|" \
    -e "s|^end-volume|    option glusterd-sockfile $gl/glusterd.socket\nend-volume|" \
    /etc/glusterfs/glusterd.vol >"$gl/glusterd.vol"
  in_ns glusterd -f "$gl/glusterd.vol" -p "$gl/glusterd.pid" -l "$gl/log/glusterd.log"
  gcli() { in_ns gluster --mode=script --glusterd-sock="$gl/glusterd.socket" "$@"; }
  for _ in $(seq 100); do gcli peer status >/dev/null 2>&1 && break; sleep 0.1; done
  # Two bricks on one host: `force` (replica 2 on one server is refused
  # otherwise, rightly for production).
  gcli volume create "$gl_volume" replica 2 "$gl_addr:$gl/brick1" "$gl_addr:$gl/brick2" force >/dev/null
  gcli volume start "$gl_volume" >/dev/null
  mounts+=("$gl/mnt")
  in_ns mount -t glusterfs -o "log-file=$gl/log/client.log" "$gl_addr:/$gl_volume" "$gl/mnt"
  wait_mounted "$gl/mnt" glusterfs
  dir[glusterfs]=$gl/mnt
fi
if has pdfs; then
  # A table is one segment, and a file's 64 MiB chunks live in the tables
  # their ids hash to: with the default 16 tables of 128 MiB a table that
  # draws two chunks and their copy-on-write pages is full
  # (resource_exhausted, EIO). Three tables of 512 MiB hold the run's files.
  # Their six copies and the three transaction logs need nine segments, but
  # one server may own all three tables: four segments a server (2.5 GiB
  # PM files, 7.5 GiB of /dev/shm).
  "$pdpm" up --dir "$work/cluster" --replicas 2 --pm-size 2560MiB --segment-size 512MiB --tables 3 \
    --monitor-port "$(free_ports 1)" --server-port "$(free_ports 3)" --gateway-port 0 \
    --timeout 60s >/dev/null
  "$pdpm" fs volume create bench --dir "$work/cluster" >/dev/null
  mkdir -p "$work/pdfs/mnt"
  mounts+=("$work/pdfs/mnt")
  "$pdpm" fs mount bench "$work/pdfs/mnt" --dir "$work/cluster" >/dev/null
  dir[pdfs]=$work/pdfs/mnt
  lib=(--monitor "$(cat "$work/cluster/monitor.addr")" --secret-file "$work/cluster/cluster.secret"
    --volume bench)
fi

# Figures: lines "<target> <name> <value> <unit>" in $work/figures. A
# figure that fails (its error printed) is listed in `failed`, the others
# still run, and the script exits 1 at the end.
: >"$work/figures"
failed=()
record() { echo "$1 $2 $3 $4" >>"$work/figures"; }
fio_run() {  # target rw bs size jobs -> the value (MiB/s for 1M, IOPS for 4k)
  local target=$1 rw=$2 bs=$3 size=$4 jobs=$5 file=seq
  [[ $bs == 4k ]] && file=rand
  fio --name=bench --directory="${dir[$target]}" --filename_format="$file.\$jobnum" \
    --rw="$rw" --bs="$bs" --size="$size" --numjobs="$jobs" --ioengine=psync \
    --end_fsync=1 --runtime="$seconds" --group_reporting --output-format=json \
    >"$work/fio.json" 2>"$work/fio.err" ||
    { cat "$work/fio.err" >&2; echo "bench-fs: fio $rw on $target failed" >&2; return 1; }
  local side=read
  [[ $rw == *write ]] && side="write"
  if [[ $bs == 4k ]]; then
    jq -r ".jobs[0].$side.iops | . * 10 | floor / 10" "$work/fio.json"
  else
    jq -r ".jobs[0].$side.bw_bytes / 1048576 | . * 10 | floor / 10" "$work/fio.json"
  fi
}
fio_figures() {  # target
  local jobs suffix v
  for jobs in 1 4; do
    suffix=""
    [[ $jobs == 4 ]] && suffix=.x4
    for spec in "write 1M $seq_bytes write.1MiB MiB/s" "read 1M $seq_bytes read.1MiB MiB/s" \
      "randwrite 4k $rand_bytes randwrite.4KiB IOPS" "randread 4k $rand_bytes randread.4KiB IOPS"; do
      read -r rw bs size name unit <<<"$spec"
      if v=$(fio_run "$1" "$rw" "$bs" "$size" "$jobs"); then
        record "$1" "fs.fuse.$name$suffix" "$v" "$unit"
        echo "  $1 fio $name jobs $jobs: $v $unit"
      else
        failed+=("$1 fs.fuse.$name$suffix")
      fi
    done
    rm -f "${dir[$1]}"/seq.* "${dir[$1]}"/rand.*
  done
}
bench_figures() {  # target prefix args... : pdfs_bench's FIGURE lines recorded
  local target=$1 prefix=$2
  shift 2
  "$bench" "$@" --seconds "$seconds" >"$work/bench.out" || {
    echo "bench-fs: pdfs_bench $* on $target failed" >&2
    failed+=("$target pdfs_bench $1 (figures after those printed)")
  }
  while read -r _ name value unit; do
    [[ $unit == IOPS || $unit == ops/s && $name == rand* ]] && unit=IOPS
    record "$target" "$prefix.$name" "$value" "$unit"
    echo "  $target $prefix.$name: $value $unit"
  done <"$work/bench.out"
}

for t in $targets; do
  echo "bench-fs: $t"
  fio_figures "$t"
  bench_figures "$t" fs meta --dir "${dir[$t]}" --files "$files" --dirs "$dirs"
done
if has pdfs; then
  echo "bench-fs: pDFSLib"
  for jobs in 1 4; do
    bench_figures lib fs.lib data "${lib[@]}" --jobs "$jobs" --seq-bytes "$seq_bytes" \
      --rand-bytes "$rand_bytes"
  done
  bench_figures lib fs.lib meta "${lib[@]}" --files "$files" --dirs "$dirs"
  # The tcp transport's raw one-sided WRITE/READ (1 and 4 connections), as
  # scripts/bench-net.sh runs it.
  mkfifo "$work/net.in"
  "$net_bench" server 127.0.0.1:0 127.0.0.1:0 <"$work/net.in" >"$work/net.out" &
  net_pid=$!
  exec 9>"$work/net.in"  # the server runs until this closes
  for _ in $(seq 100); do grep -q '^LISTEN' "$work/net.out" 2>/dev/null && break; sleep 0.1; done
  read -r _ raw_addr rpc_addr <"$work/net.out"
  "$net_bench" client "$raw_addr" "$rpc_addr" 0.5 >"$work/net.client"
  exec 9>&-
  wait "$net_pid"
  awk '$1 == "RESULT" && $2 ~ /^(write|read)\.(4|1024)KiB(\.x4)?$/ {print "tcp", $2, $3, $4}' \
    "$work/net.client" >>"$work/figures"
fi
read -r load_end _ </proc/loadavg
echo "bench-fs: load average $load_end at the end ($(nproc) cores)"

# The table, the goals and the BENCH lines.
python3 - "$work/figures" "$load_start" "$load_end" "$(nproc)" >"$work/report" <<'PY'
import sys
figs, order = {}, []
for line in open(sys.argv[1]):
    target, name, value, unit = line.split()
    if target in ("pdfs", "lib"):
        order.append((target, name, unit))
    figs[(target, name)] = float(value)
load = max(float(sys.argv[2]), float(sys.argv[3]))
loaded = load > int(sys.argv[4])

def ref_name(target, name):  # the mount figure a pDFSLib figure compares with
    if target == "lib":
        return name.replace("fs.lib.meta.", "fs.meta.").replace("fs.lib.", "fs.fuse.")
    return name

def tcp_ref(name):  # net_bench's raw figure in the same unit, or None
    base = name.split(".")[2] if name.count(".") >= 3 else ""
    if "meta" in name or base not in ("write", "read", "randwrite", "randread"):
        return None
    kib = "1024KiB" if "1MiB" in name else "4KiB"
    jobs = ".x4" if name.endswith(".x4") else ""
    raw = figs.get(("tcp", ("write." if "write" in base else "read.") + kib + jobs))
    if raw is None:
        return None
    raw_mibs = raw * 1e6 / 1048576  # net_bench: MB/s
    return raw_mibs if kib == "1024KiB" else raw_mibs * 1048576 / 4096

def goals(target, name):
    out = []
    meta = ".meta." in name or name.startswith("fs.meta.")
    if target == "pdfs" and meta:
        out.append(("glusterfs", 10))
    if target == "lib" and meta:
        out.append(("glusterfs", 20))
    if target == "pdfs" and not meta:
        if ".write.1MiB" in name or ".read.1MiB" in name:
            out.append(("glusterfs", 3))
        out.append(("passthrough", 0.5))
    return out

print("%-34s %12s %-9s %12s %12s %12s %8s %8s %8s" % (
    "figure", "pdfs", "unit", "glusterfs", "passthrough", "tmpfs", "/gluster", "/passth", "/tmpfs"))
bench, missed = [], []
for target, name, unit in order:
    v = figs[(target, name)]
    rn = ref_name(target, name)
    refs = {r: figs.get((r, rn)) for r in ("glusterfs", "passthrough", "tmpfs")}
    ratio = {r: (v / x if x else None) for r, x in refs.items()}
    fmt = lambda x: "-" if x is None else "%.1f" % x
    fr = lambda x: "-" if x is None else "%.3f" % x
    print("%-34s %12.1f %-9s %12s %12s %12s %8s %8s %8s" % (
        name, v, unit, fmt(refs["glusterfs"]), fmt(refs["passthrough"]), fmt(refs["tmpfs"]),
        fr(ratio["glusterfs"]), fr(ratio["passthrough"]), fr(ratio["tmpfs"])))
    g = refs["glusterfs"]
    line = "BENCH name=%s value=%.1f unit=%s" % (name, v, unit)
    if g:
        line += " ref=glusterfs:%.1f ratio=%.3f" % (g, ratio["glusterfs"])
    bench.append(line)
    for r in ("tmpfs", "passthrough"):
        if refs[r]:
            bench.append("BENCH name=%s.%s value=%.1f unit=%s ref=%s:%.1f ratio=%.3f" % (
                name, r, v, unit, r, refs[r], ratio[r]))
    t = tcp_ref(name) if target == "lib" else None
    if t:
        bench.append("BENCH name=%s.tcp value=%.1f unit=%s ref=net_bench:%.1f ratio=%.3f" % (
            name, v, unit, t, v / t))
    for r, want in goals(target, name):
        if ratio[r] is None:
            continue
        ok = ratio[r] >= want
        msg = "goal %-32s >= %4sx %-11s: %.3f  %s" % (name, want, r, ratio[r], "met" if ok else "NOT MET")
        bench.append(msg)
        if not ok:
            missed.append(name)
print()
print("\n".join(bench))
print()
print("load average %.2f on %s cores: %s" % (load, sys.argv[4],
      "LOADED — check the references against a quiet run before trusting ratios" if loaded else "quiet"))
for m in sorted(set(missed)):
    print("MISSED", m)
PY
grep -v '^MISSED' "$work/report"
for f in "${failed[@]}"; do echo "FAILED: $f"; done
status=0
((${#failed[@]} == 0)) || status=1

# A profile of each pDFS figure whose goal was missed (one per kind).
[[ $profile == 1 ]] && has pdfs || exit $status
mapfile -t missed < <(sed -n 's/^MISSED //p' "$work/report")
((${#missed[@]} > 0)) || exit $status
server_pids=$(cat "$work"/cluster/server-*.pid | paste -sd,)
fuse_pid=$(cat "$work"/cluster/fs/*.pid)
profile_run() {  # title pids self command... (self=1: profile the command too)
  local title=$1 pids=$2 self=$3
  shift 3
  echo
  echo "bench-fs: profile of $title (perf record -g; self time, top entries)"
  local cmd_pid
  "$@" >/dev/null 2>&1 &
  cmd_pid=$!
  [[ $self == 1 ]] && pids=$pids,$cmd_pid
  perf record -q -g -o "$work/perf.data" -p "$pids" >/dev/null 2>&1 &
  local perf_pid=$!
  wait "$cmd_pid" || true
  kill -INT "$perf_pid" 2>/dev/null
  wait "$perf_pid" 2>/dev/null || true
  perf report -i "$work/perf.data" --stdio --no-children --sort comm,dso,sym -g none \
    --percent-limit 0.7 2>/dev/null | grep -v '^#' | grep -v '^$' | head -40
}
declare -A profiled
for name in "${missed[@]}"; do
  case $name in
    fs.fuse.*write.1MiB*) key=fuse-write ;;
    fs.fuse.*read.1MiB*) key=fuse-read ;;
    fs.fuse.*randwrite*) key=fuse-randwrite ;;
    fs.fuse.*randread*) key=fuse-randread ;;
    fs.meta.*) key=fuse-meta ;;
    fs.lib.meta.*) key="lib-meta" ;;
    *) continue ;;
  esac
  [[ -n ${profiled[$key]:-} ]] && continue
  profiled[$key]=1
  case $key in
    fuse-meta)
      profile_run "metadata through the mount (pdfs_bench meta; pdfs-fuse and the servers)" \
        "$fuse_pid,$server_pids" 0 \
        "$bench" meta --dir "${dir[pdfs]}" --files "$files" --dirs "$dirs" --seconds "$seconds" ;;
    lib-meta)
      profile_run "metadata through pDFSLib (pdfs_bench and the servers)" "$server_pids" 1 \
        "$bench" meta "${lib[@]}" --files "$files" --dirs "$dirs" --seconds "$seconds" ;;
    fuse-*)
      read -r rw bs size <<<"$(case $key in
        fuse-write) echo "write 1M $seq_bytes" ;; fuse-read) echo "read 1M $seq_bytes" ;;
        fuse-randwrite) echo "randwrite 4k $rand_bytes" ;; *) echo "randread 4k $rand_bytes" ;; esac)"
      profile_run "fio $rw $bs through the mount (pdfs-fuse and the servers)" \
        "$fuse_pid,$server_pids" 0 fio_run pdfs "$rw" "$bs" "$size" 1
      rm -f "${dir[pdfs]}"/seq.* "${dir[pdfs]}"/rand.* ;;
  esac
done
exit $status
