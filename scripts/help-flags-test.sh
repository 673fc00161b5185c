#!/usr/bin/env bash
# Every daemon and tool given as an argument answers --help (and -h) with
# its usage on stdout, nothing on stderr, and exit code 0; an unknown flag
# still fails with a non-zero code.
# usage: help-flags-test.sh BINARY...
set -uo pipefail
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
failed=0
for binary in "$@"; do
  name=$(basename "$binary")
  for flag in --help -h; do
    "$binary" "$flag" </dev/null >"$out" 2>"$err"
    rc=$?
    if [[ $rc -ne 0 ]] || ! grep -qi '^usage' "$out" || [[ -s $err ]]; then
      echo "FAIL: $name $flag: exit $rc, stdout: $(head -c 200 "$out"), stderr: $(head -c 200 "$err")"
      failed=1
    fi
  done
  if "$binary" --no-such-flag-at-all </dev/null >/dev/null 2>&1; then
    echo "FAIL: $name accepted an unknown flag"
    failed=1
  fi
done
[[ $failed -eq 0 ]] && echo "all $# programs answer --help"
exit $failed
