#!/usr/bin/env bash
# What `make up` runs after building: starts the local cluster with
# `pdpm up` (unless it already runs) and shows it working — a file stored
# as an object, read back and compared; a key written with `pdpm kv` and
# read through the Redis protocol; a pDFS volume mounted (FUSE), files
# written and read in it, `pdpm fs volume list`; then `pdpm status`.
#
#   scripts/cluster-up.sh <build dir>      (PDPM_DIR overrides the cluster directory)
set -euo pipefail
build_dir=${1:?usage: cluster-up.sh <build dir>}
pdpm="$build_dir/src/tools/pdpm"
[[ -x $pdpm ]] || { echo "cluster-up: $pdpm not built" >&2; exit 1; }
dir_flag=()
[[ -n ${PDPM_DIR:-} ]] && dir_flag=(--dir "$PDPM_DIR")

if "$pdpm" status "${dir_flag[@]}" >/dev/null 2>&1; then
  echo "PDPM is already running."
else
  "$pdpm" up "${dir_flag[@]}"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -c $((3 * 1024 * 1024)) /dev/urandom >"$tmp/sample"
id=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
echo
echo "\$ pdpm obj put $id sample      # 3 MiB of random bytes"
"$pdpm" obj put "$id" "$tmp/sample" "${dir_flag[@]}"
echo "\$ pdpm obj get $id back"
"$pdpm" obj get "$id" "$tmp/back" "${dir_flag[@]}"
cmp "$tmp/sample" "$tmp/back"
echo "read back identical ($(stat -c %s "$tmp/back") bytes)"
echo "\$ pdpm obj del $id"
"$pdpm" obj del "$id" "${dir_flag[@]}"
echo "\$ pdpm kv put greeting \"hello from pDKVS\""
"$pdpm" kv put greeting "hello from pDKVS" "${dir_flag[@]}"
dir=${PDPM_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/pdpm}
if [[ -e $dir/gateway.addr ]]; then
  port=$(sed 's/.*://' "$dir/gateway.addr")
  echo "\$ redis-cli -p $port get greeting"
  redis-cli -p "$port" get greeting
else
  echo "\$ pdpm kv get greeting"
  "$pdpm" kv get greeting "${dir_flag[@]}"
fi
mnt=$dir/mnt/demo
echo
if ! "$pdpm" fs volume list "${dir_flag[@]}" | awk '{print $1}' | grep -qx demo; then
  echo "\$ pdpm fs volume create demo --bytes 256MiB --inodes 10000"
  "$pdpm" fs volume create demo --bytes 256MiB --inodes 10000 "${dir_flag[@]}"
fi
if ! mountpoint -q "$mnt"; then
  mkdir -p "$mnt"
  echo "\$ pdpm fs mount demo $mnt"
  "$pdpm" fs mount demo "$mnt" "${dir_flag[@]}"
fi
echo "\$ cp sample $mnt/sample && cmp sample $mnt/sample    # through the FUSE mount"
cp "$tmp/sample" "$mnt/sample"
cmp "$tmp/sample" "$mnt/sample"
echo "read back identical"
echo "\$ echo 'hello from pDFS' > $mnt/hello.txt && cat $mnt/hello.txt"
echo 'hello from pDFS' >"$mnt/hello.txt"
cat "$mnt/hello.txt"
echo "\$ ls -l $mnt"
ls -l "$mnt"
echo "\$ pdpm fs volume list"
"$pdpm" fs volume list "${dir_flag[@]}"
# The second copy of a new segment fills in the background: give it (at
# most 30 s) before showing the status.
for _ in $(seq 60); do
  "$pdpm" status "${dir_flag[@]}" >/dev/null 2>&1 && break
  sleep 0.5
done
echo "\$ pdpm status"
"$pdpm" status "${dir_flag[@]}"
echo
echo "pdpm is $pdpm; \`$pdpm help\` lists its commands, \`$pdpm down${dir_flag[*]:+ ${dir_flag[*]}}\` stops the cluster"
echo "(and unmounts $mnt)."
