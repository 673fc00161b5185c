#!/usr/bin/env bash
# Runs every libFuzzer target built in BUILD_DIR for SECONDS each, starting
# from its checked-in seed corpus, JOBS of them at a time (default: one per
# core; each fuzzer is single-threaded, so running them one after another
# left all but one core idle). Any crash fails the run.
#
#   scripts/run-fuzzers.sh BUILD_DIR SECONDS [JOBS]
set -euo pipefail
build_dir=$1
seconds=$2
jobs=${3:-$(nproc)}
root=$(cd "$(dirname "$0")/.." && pwd)
mapfile -t fuzzers < <(find "$build_dir" -maxdepth 4 -type f -name '*_fuzzer' -perm -u+x | sort)
if ((${#fuzzers[@]} == 0)); then
  echo "run-fuzzers: no fuzz targets found in $build_dir" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Runs fuzzer $1 with a fresh corpus directory beside the seeds; its output
# goes to $work/NAME.log, its exit status to $work/NAME.rc.
fuzz_one() {
  local f=$1 name corpus seeds rc=0
  name=$(basename "$f")
  corpus=$work/$name.corpus
  mkdir "$corpus"
  seeds="$root/core/fuzz/corpus/$name"
  local dirs=("$corpus")
  [[ -d $seeds ]] && dirs+=("$seeds")
  "$f" -max_total_time="$seconds" -print_final_stats=1 "${dirs[@]}" >"$work/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$work/$name.rc"
}

running=0
for f in "${fuzzers[@]}"; do
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
  echo "fuzz: $(basename "$f") for ${seconds}s"
  fuzz_one "$f" &
  running=$((running + 1))
done
wait

passed=0
failed=0
for f in "${fuzzers[@]}"; do
  name=$(basename "$f")
  echo "=== fuzz: $name"
  tail -n 12 "$work/$name.log"
  if [[ $(<"$work/$name.rc") == 0 ]]; then
    passed=$((passed + 1))
  else
    echo "fuzz: $name FAILED (exit $(<"$work/$name.rc")); its whole output:" >&2
    cat "$work/$name.log" >&2
    failed=$((failed + 1))
  fi
done
echo "fuzz: $passed passed, $failed failed"
((failed == 0))
