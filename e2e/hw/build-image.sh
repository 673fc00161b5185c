#!/usr/bin/env bash
# Builds (or reuses) the hardware guest: a Debian 12 root file system with
# soft-RoCE, ndctl and the runtime libraries of the test binaries, as a raw
# ext4 image plus the kernel and initrd to boot it with.
#
# Cached under ${XDG_CACHE_HOME:-~/.cache}/pdpm/hw/<hash>/, where <hash>
# covers the package list and the scripts that shape the image; a change to
# either builds a new image. Prints the cache directory on stdout.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/pdpm/hw
inputs=("$here/packages.txt" "$here/build-image.sh" "$here/guest-stub-init")
hash=$(cat "${inputs[@]}" | sha256sum | cut -c1-16)
out=$cache_root/$hash
if [[ -f $out/ready ]]; then
  touch "$out/ready"  # most recently used images are kept
  echo "$out"
  exit 0
fi
mkdir -p "$cache_root"
# One build at a time; a concurrent run may have built it meanwhile.
exec 9>"$cache_root/lock"
flock 9
if [[ -f $out/ready ]]; then
  echo "$out"
  exit 0
fi

log() { echo "hw-image: $*" >&2; }
# Only the final path goes to stdout; the tools' chatter goes to stderr.
exec 3>&1 1>&2

# The Debian mirror the host's apt uses (override: PDPM_HW_MIRROR).
mirror=${PDPM_HW_MIRROR:-}
if [[ -z $mirror ]]; then
  mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources \
    2>/dev/null || true)
fi
if [[ -z $mirror ]]; then
  mirror=$(awk '$1 == "deb" && $3 !~ /security/ {print $2; exit}' /etc/apt/sources.list \
    2>/dev/null || true)
fi
[[ -n $mirror ]] || { log "no Debian mirror found in the apt configuration"; exit 1; }

packages=$(grep -v '^\s*#' "$here/packages.txt" | grep -v '^\s*$' | paste -sd, -)
work=$(mktemp -d "$cache_root/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root

log "debootstrap bookworm (minbase + ${packages//,/ }) — a few minutes"
debootstrap --variant=minbase --include="$packages" bookworm "$root" "$mirror" \
  >"$work/debootstrap.log" 2>&1 || { tail -30 "$work/debootstrap.log" >&2; exit 1; }

install -m 0755 "$here/guest-stub-init" "$root/sbin/pdpm-init"
echo pdpm-hw >"$root/etc/hostname"
: >"$root/etc/fstab"
# Nothing in the image needs the package caches or documentation.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
  "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*

kernel=$(ls "$root"/boot/vmlinuz-* | sort -V | tail -1)
initrd=$(ls "$root"/boot/initrd.img-* | sort -V | tail -1)
mkdir -p "$work/out"
cp "$kernel" "$work/out/vmlinuz"
cp "$initrd" "$work/out/initrd.img"
log "ext4 image"
mkfs.ext4 -q -F -L pdpm-hw -d "$root" "$work/out/rootfs.ext4" 2G
touch "$work/out/ready"

mv -T "$work/out" "$out"
# Keep the three most recently used images (branches differ in their
# inputs); a running guest keeps its open files even when one goes.
ls -1t "$cache_root"/*/ready 2>/dev/null | tail -n +4 | while read -r old; do
  rm -rf "$(dirname "$old")"
done
log "ready: $out"
echo "$out" >&3
