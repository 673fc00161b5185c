#!/usr/bin/env bash
# Runs every libFuzzer target built in BUILD_DIR for SECONDS each, starting
# from its checked-in seed corpus. Any crash fails the run.
set -euo pipefail
build_dir=$1
seconds=$2
root=$(cd "$(dirname "$0")/.." && pwd)
mapfile -t fuzzers < <(find "$build_dir" -maxdepth 4 -type f -name '*_fuzzer' -perm -u+x | sort)
if ((${#fuzzers[@]} == 0)); then
  echo "run-fuzzers: no fuzz targets found in $build_dir" >&2
  exit 1
fi
passed=0
for f in "${fuzzers[@]}"; do
  name=$(basename "$f")
  corpus=$(mktemp -d)
  seeds="$root/core/fuzz/corpus/$name"
  dirs=("$corpus")
  [[ -d $seeds ]] && dirs+=("$seeds")
  echo "fuzz: $name for ${seconds}s"
  "$f" -max_total_time="$seconds" -print_final_stats=1 "${dirs[@]}" 2>&1 | tail -n 12
  rm -rf "$corpus"
  passed=$((passed + 1))
done
echo "fuzz: $passed passed, 0 failed"
