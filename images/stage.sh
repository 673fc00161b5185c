#!/usr/bin/env bash
# Puts the `bin` and `gobin` entries of LIST under ROOT/usr/local/bin:
# binaries of the C++ build (BUILD_DIR) with their debug information
# stripped, and Go commands built static (of the operator module, or of
# the module directory a `gobin` line names third), each told its version.
#   stage.sh LIST ROOT [BUILD_DIR]
# The project's root is this script's parent directory.
set -euo pipefail
list=$1 root=$2 build=${3:-}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/usr/local/bin"
while read -r kind a b module; do
  case $kind in
  bin)
    if [[ -z $build || ! -x $build/$a ]]; then
      echo "stage: $build/$a: not built (run the release build first)" >&2
      exit 1
    fi
    install -m 0755 "$build/$a" "$root/usr/local/bin/"
    strip --strip-debug "$root/usr/local/bin/$(basename "$a")"
    ;;
  gobin)
    # The version the command prints (its main.version): its module's
    # release for a dependency's command (the CSI sidecars), else ours.
    version=$(cd "$src/${module:-operator}" && go list -f '{{with .Module}}{{.Version}}{{end}}' "$b")
    (cd "$src/${module:-operator}" && CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X main.version=${version:-$(<"$src/VERSION")}" -o "$root/usr/local/bin/$a" "$b")
    ;;
  esac
done < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$list")
