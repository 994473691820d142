#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz (built by `make fuzz-build` in
# build-fuzz), one at a time, each for SECONDS (or FUZZ_RUNS executions when
# that is set), and fails if any finds a crash, a leak, undefined behaviour,
# a timeout or an out-of-memory. Run from the repository root:
#   tools/run_fuzzers.sh SECONDS [BUILD_DIR] [NAME...]
# Seeds come from tests/fuzz/corpus/NAME (never written); what a run finds
# goes to BUILD_DIR/fuzz/NAME/corpus, and a failing input to
# BUILD_DIR/fuzz/NAME/artifacts/ (reproduce: BUILD_DIR/bin/NAME_fuzz FILE).
set -uo pipefail

seconds=${1:-60}
build=${2:-build-fuzz}
shift $(( $# < 2 ? $# : 2 ))
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(job_spec model_file snapshot idx csv store npy npz image csv_label)

# Longest input per target: a few times the largest seed, enough for every
# field of the format, small enough to keep the runs fast.
max_len() {
  case "$1" in
    job_spec|store) echo 4096 ;;
    model_file|snapshot|idx) echo 2048 ;;
    npz|image) echo 8192 ;;
    *) echo 1024 ;;
  esac
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=()
for name in "${names[@]}"; do
  bin="$build/bin/${name}_fuzz"
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin is missing (make fuzz-build)" >&2
    exit 2
  fi
  work="$build/fuzz/$name"
  mkdir -p "$work/corpus" "$work/artifacts"
  args=(-max_len="$(max_len "$name")" -timeout=10 -rss_limit_mb=2048
        -print_final_stats=1 -artifact_prefix="$work/artifacts/")
  if [ -n "${FUZZ_RUNS:-}" ]; then args+=(-runs="$FUZZ_RUNS"); else args+=(-max_total_time="$seconds"); fi
  [ -f "tests/fuzz/$name.dict" ] && args+=(-dict="tests/fuzz/$name.dict")
  start=$(date +%s)
  "$bin" "${args[@]}" "$work/corpus" "tests/fuzz/corpus/$name" >"$work/log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -1)
  printf 'fuzz: %-10s %10s executions %7s exec/s %4ss  %s\n' "$name" "${runs:-?}" \
    "${rate:-?}" "$(( $(date +%s) - start ))" "$([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc)")"
  if [ $rc -ne 0 ]; then
    failed+=("$name")
    tail -n 60 "$work/log" >&2
    ls -l "$work/artifacts" >&2
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (logs in $build/fuzz/NAME/log)" >&2
  exit 1
fi
