#!/bin/sh
# Runs as root inside an image's root file system (a Dockerfile's RUN, or
# chroot in images/build.sh): installs the `deb` lines of LIST with apt,
# adds the unprivileged user the daemons run as, and drops what a runtime
# image does not need (apt lists, caches, documentation but the licences).
#   install.sh LIST
set -eu
list=$1
debs=$(sed -n 's/^deb[[:space:]]\{1,\}\([^[:space:]#]*\).*/\1/p' "$list")
if [ -n "$debs" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086 # one word per package
  apt-get install -y -qq --no-install-recommends $debs >/dev/null
fi
# uid/gid 65532: the conventional unprivileged user of minimal images.
if ! getent passwd pdpm >/dev/null; then
  groupadd --system -K SYS_GID_MAX=65532 --gid 65532 pdpm
  useradd --system -K SYS_UID_MAX=65532 --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin pdpm
fi
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt/* /var/log/dpkg.log \
  /usr/share/man/* /usr/share/info/* /usr/share/locale/*
find /usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete
find /usr/share/doc -mindepth 1 -type d -empty -delete
