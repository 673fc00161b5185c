#!/usr/bin/env bash
# The daemonless image build (docs/images.md): the same content as the
# Dockerfiles, from the same lists, without a container daemon. A Debian 12
# minbase root file system (debootstrap, cached), the list's packages
# installed in it by images/install.sh under chroot, the binaries staged by
# images/stage.sh, packed as an OCI image by umoci. Run as root.
#
#   images/build.sh BUILD_DIR OUT_DIR
#
# Writes OUT_DIR/<name>.tar (OCI image archives `ctr images import` takes)
# for core (pdpm/core:VERSION), operator (pdpm/operator:VERSION), csi
# (pdpm/csi:VERSION: the CSI driver, docs/csi.md) and the
# test-only images e2e-client (pdpm-e2e/client:VERSION: redis-cli) and
# pause (pdpm-e2e/pause:VERSION, the pod sandbox), and prints each image's
# name, reference and size. Fails when the core image exceeds 150 MB.
# Images are kept in the cache by the hash of their inputs (list, scripts,
# staged binaries): an image is built only when no archive of the same
# inputs is there, so switching between trees (branches, worktrees) and
# back builds nothing again. The last few of each image are kept.
set -euo pipefail
build=$(cd "$1" && pwd)
out=$2
src=$(cd "$(dirname "$0")/.." && pwd)
version=$(cat "$src/VERSION")
suite=bookworm
core_budget_mb=150
cache=${XDG_CACHE_HOME:-$HOME/.cache}/pdpm/images
store=$cache/by-key # ARCHIVE-KEY.tar and .size: images by their inputs' hash
keep_per_image=4
mkdir -p "$cache/debs" "$store" "$out"
out=$(cd "$out" && pwd)

log() { echo "images: $*" >&2; }

# Debian's mirror as this machine's apt is configured (DEBIAN_MIRROR wins).
mirror() {
  if [[ -n ${DEBIAN_MIRROR:-} ]]; then
    echo "$DEBIAN_MIRROR"
    return
  fi
  local m
  m=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null |
    grep -v security | head -1 || true)
  [[ -n $m ]] || m=$(awk '$1 == "deb" && $3 == "'$suite'" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
  [[ -n $m ]] || {
    log "no Debian mirror in apt's sources; set DEBIAN_MIRROR"
    exit 1
  }
  echo "$m"
}

# The minbase root file system, as a tar, built once per suite.
base_rootfs() {
  local tar=$cache/minbase-$suite.tar
  if [[ ! -f $tar ]]; then
    log "debootstrap $suite minbase (once; a few minutes)"
    local dir
    dir=$(mktemp -d)
    debootstrap --variant=minbase --cache-dir="$cache/debs" "$suite" "$dir/rootfs" "$(mirror)" >&2
    tar -C "$dir/rootfs" --numeric-owner -cf "$tar.tmp" .
    rm -rf "$dir"
    mv "$tar.tmp" "$tar"
  fi
  echo "$tar"
}

# Runs images/install.sh LIST inside ROOT: a private mount namespace gives
# the chroot /proc and this machine's resolver, and takes both away after.
install_in() { # root list
  local root=$1 list=$2
  cp "$src/images/install.sh" "$root/install.sh"
  cp "$list" "$root/image.list"
  unshare --mount --propagation private sh -euc '
    mount -t proc proc "$1/proc"
    mount -t devpts -o newinstance devpts "$1/dev/pts"
    mount --bind /etc/resolv.conf "$1/etc/resolv.conf" 2>/dev/null ||
      { cp /etc/resolv.conf "$1/etc/resolv.conf"; }
    chroot "$1" /bin/sh /install.sh /image.list' sh "$root" >&2
  rm -f "$root/install.sh" "$root/image.list"
}

# Packs ROOT as OCI image NAME:VERSION into the archive ARCHIVE with the
# config given (user, entrypoint) and the OCI labels.
pack() { # root archive name user description [entrypoint...]
  local root=$1 archive=$2 name=$3 user=$4 description=$5
  shift 5
  local work
  work=$(mktemp -d)
  umoci init --layout "$work/layout"
  umoci new --image "$work/layout:$version"
  umoci unpack --image "$work/layout:$version" "$work/bundle"
  rm -rf "$work/bundle/rootfs"
  mv "$root" "$work/bundle/rootfs"
  umoci repack --image "$work/layout:$version" "$work/bundle"
  local args=(--config.user="$user" --config.workingdir=/
    --config.label=org.opencontainers.image.title="$name"
    --config.label=org.opencontainers.image.version="$version"
    --config.label=org.opencontainers.image.description="$description")
  for e in "$@"; do args+=(--config.entrypoint="$e"); done
  umoci config --image "$work/layout:$version" "${args[@]}"
  umoci gc --layout "$work/layout"
  # ctr names an image by its index's ref.name annotation: the full name.
  jq --arg ref "docker.io/$name:$version" \
    '.manifests[0].annotations["org.opencontainers.image.ref.name"] = $ref' \
    "$work/layout/index.json" >"$work/index.json"
  mv "$work/index.json" "$work/layout/index.json"
  tar -C "$work/layout" -cf "$archive.tmp" .
  mv "$archive.tmp" "$archive"
  rm -rf "$work"
}

# The image FILE of inputs KEY is in the store: it becomes OUT_DIR/FILE.tar
# (a hard link), and only the most recently used archives of FILE stay.
publish() { # file key
  local file=$1 key=$2 old
  touch "$store/$file-$key.tar"
  ln -f "$store/$file-$key.tar" "$out/$file.tar" 2>/dev/null || cp "$store/$file-$key.tar" "$out/$file.tar"
  cp "$store/$file-$key.size" "$out/$file.size"
  # shellcheck disable=SC2012 # names are FILE-HEX.tar
  for old in $(ls -t "$store/$file"-????????????????.tar | tail -n +$((keep_per_image + 1))); do
    rm -f "$old" "${old%.tar}.size"
  done
}

# Builds one image from a list unless an image of the same inputs exists.
image_from_list() { # file name list user [entrypoint...]
  local file=$1 name=$2 list=$3 user=$4
  shift 4
  local stage
  stage=$(mktemp -d)
  "$src/images/stage.sh" "$list" "$stage" "$build"
  local key
  key=$( (
    echo "$suite $version $name $user $*"
    cat "$list" "$src/images/install.sh" "$src/images/build.sh"
    find "$stage" -type f -print0 | sort -z | xargs -0 sha256sum | sed "s#$stage##"
  ) | sha256sum | cut -c1-16)
  if [[ -f $store/$file-$key.tar ]]; then
    log "$name:$version up to date (inputs $key)"
    rm -rf "$stage"
    publish "$file" "$key"
    report "$file" "$name"
    return
  fi
  log "building $name:$version"
  local root
  root=$(mktemp -d)/rootfs
  mkdir -p "$root"
  tar -C "$root" --numeric-owner -xf "$(base_rootfs)"
  install_in "$root" "$list"
  cp -a "$stage/." "$root/"
  rm -rf "$stage"
  # Every library a staged binary links is in the image.
  local missing
  missing=$(chroot "$root" sh -c 'for b in /usr/local/bin/*; do ldd "$b" 2>/dev/null | sed "s#^#$b: #"; done' |
    grep 'not found' || true)
  if [[ -n $missing ]]; then
    log "$name: libraries missing from the list's packages:"$'\n'"$missing"
    exit 1
  fi
  du -sm --apparent-size "$root" | cut -f1 >"$store/$file-$key.size"
  # The list's first line says what the image is.
  pack "$root" "$store/$file-$key.tar" "$name" "$user" "$(sed -n '1s/^# //p' "$list")" "$@"
  rm -rf "$(dirname "$root")"
  publish "$file" "$key"
  report "$file" "$name"
}

report() { # file name
  printf '%-12s %-32s %4s MB unpacked, %4s MB archive\n' "$1" "docker.io/$2:$version" \
    "$(cat "$out/$1.size")" "$(($(stat -c %s "$out/$1.tar") >> 20))"
}

image_from_list operator pdpm/operator "$src/images/operator.list" 65532 /usr/local/bin/pdpm-operator
image_from_list csi pdpm/csi "$src/images/csi.list" 0 /usr/local/bin/pdpm-csi
image_from_list e2e-client pdpm-e2e/client "$src/e2e/k8s/client.list" 65532

# The pod sandbox: a static program that waits for the signal to stop.
pause_key=$(cat "$src/e2e/k8s/pause/pause.c" "$src/images/build.sh" | sha256sum | cut -c1-16)
if [[ ! -f $store/pause-$pause_key.tar ]]; then
  log "building pdpm-e2e/pause:$version"
  root=$(mktemp -d)/rootfs
  mkdir -p "$root"
  cc -static -Os -s -o "$root/pause" "$src/e2e/k8s/pause/pause.c"
  du -sm --apparent-size "$root" | cut -f1 >"$store/pause-$pause_key.size"
  pack "$root" "$store/pause-$pause_key.tar" pdpm-e2e/pause 65535 "The pod sandbox of the e2e cluster" /pause
  rm -rf "$(dirname "$root")"
fi
publish pause "$pause_key"
report pause pdpm-e2e/pause

image_from_list core pdpm/core "$src/images/core.list" 65532
core_mb=$(cat "$out/core.size")
if ((core_mb >= core_budget_mb)); then
  log "the core image is $core_mb MB unpacked, over its $core_budget_mb MB budget"
  exit 1
fi
