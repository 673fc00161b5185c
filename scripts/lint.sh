#!/usr/bin/env bash
# Style gates: clang-format and clang-tidy on the C++ core, gofmt and go vet
# on the Go modules.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

mapfile -t cxx < <(git ls-files 'core/*.h' 'core/*.cc')
if ((${#cxx[@]})); then
  clang-format --dry-run --Werror "${cxx[@]}"
  cmake --preset release -S core >/dev/null
  mapfile -t units < <(printf '%s\n' "${cxx[@]}" | grep '\.cc$')
  clang-tidy -p build/release --quiet "${units[@]}"
fi

for mod in operator csi-driver e2e/linearizability; do
  [[ -f $mod/go.mod ]] || continue
  unformatted=$(cd "$mod" && gofmt -l $(git ls-files '*.go'))
  if [[ -n $unformatted ]]; then
    echo "gofmt: not formatted:" "$unformatted" >&2
    exit 1
  fi
  (cd "$mod" && go vet ./...)
done
echo "lint: clean"
