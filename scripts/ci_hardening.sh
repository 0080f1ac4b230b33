#!/usr/bin/env bash
# The hardening stages of CI (after run_tests.sh): the unit tests and the stress test under
# AddressSanitizer (with UBSan) and under ThreadSanitizer, then a libFuzzer smoke run of every
# fuzz target from the checked-in seed corpus. Builds with clang-14 in build-asan (also the
# fuzzers) and build-tsan. Any sanitizer report, test failure or fuzzer finding fails the script.
# Each stage prints what it took.
#   STRESS_SECONDS   duration of the stress test under each sanitizer (default 120)
#   FUZZ_SECONDS     fuzzing time per target (default 60)
#   JOBS             build jobs (default: number of cores)
# Usage: sudo scripts/ci_hardening.sh [build|test]
#   build   only the two sanitizer builds (.ci/run runs them beside the test suite)
#   test    only what runs in them (after `build`)
#   (none)  both
set -euo pipefail
cd "$(dirname "$0")/.."
PHASE=${1:-all}
case $PHASE in
  all | build | test) ;;
  *) echo "usage: $0 [build|test]" >&2; exit 2 ;;
esac
STRESS_SECONDS=${STRESS_SECONDS:-120}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
JOBS=${JOBS:-$(nproc)}
CLANG=(-DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14)
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:die_after_fork=0
export LSAN_OPTIONS=suppressions=$PWD/tests/fuzz/lsan.supp
# The daemon's reports go to files (its stderr is not the test's): any file there fails CI.
reports=$(mktemp -d)
export ASAN_OPTIONS=$ASAN_OPTIONS:log_path=$reports/asan
export TSAN_OPTIONS=$TSAN_OPTIONS:log_path=$reports/tsan
export UBSAN_OPTIONS=$UBSAN_OPTIONS:log_path=$reports/ubsan
# On any failure, show what the sanitizers wrote.
trap 'cat "$reports"/* >&2 2>/dev/null || true' EXIT
check_reports() {
  if compgen -G "$reports/*" >/dev/null; then
    cat "$reports"/* >&2
    echo "ci_hardening: sanitizer reports above ($*)" >&2
    exit 1
  fi
}

# A stage's line names it; the next one says how long the one before took.
stage_name="" stage_start=0
stage() {
  local now
  now=$(date +%s)
  [[ -n $stage_name ]] && echo "=== ci_hardening: $stage_name: $((now - stage_start)) s"
  stage_name=$* stage_start=$now
  [[ -n $stage_name ]] && echo "=== ci_hardening: $* ($(date +%T))"
  return 0
}

# One AddressSanitizer build serves the ASan stage and the fuzzers (DSFS_FUZZ adds libFuzzer's
# coverage instrumentation to the ASan+UBSan build): one build less on a 2-core CI machine. The
# stress test is built alone (dsfs_stress_tests), not with the other mount tests.
sanitizer_dir() { [[ $1 == address ]] && echo build-asan || echo build-tsan; }
build_sanitizer() {
  local san=$1 dir extra targets
  dir=$(sanitizer_dir "$san")
  if [[ $san == address ]]; then
    extra=(-DDSFS_FUZZ=ON)
    targets=(dsfs dsfs_unit_tests dsfs_stress_tests fuzz_store fuzz_image fuzz_record fuzz_s3index)
  else
    extra=()
    targets=(dsfs dsfs_unit_tests dsfs_stress_tests)
  fi
  stage "$san sanitizer build in $dir"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${CLANG[@]}" \
    -DDSFS_SANITIZE="$san" "${extra[@]}" >/dev/null
  cmake --build "$dir" -j "$JOBS" --target "${targets[@]}"
}
test_sanitizer() {
  local san=$1 dir
  dir=$(sanitizer_dir "$san")
  stage "$san: unit tests"
  # The install and systemd tests need the whole build and nothing a sanitizer adds: skipped.
  "$dir/tests/dsfs_unit_tests" --gtest_brief=1 --gtest_filter='-InstallTest.*:SystemdTest.*'
  stage "$san: stress test, ${STRESS_SECONDS} s"
  DSFS_STRESS_SECONDS=$STRESS_SECONDS "$dir/tests/dsfs_stress_tests" --gtest_filter='StressTest.*'
  check_reports "$san"
}

if [[ $PHASE != test ]]; then
  for san in address thread; do build_sanitizer "$san"; done
fi
if [[ $PHASE == build ]]; then
  stage ""
  exit 0
fi
for san in address thread; do test_sanitizer "$san"; done

for target in store image record s3index; do
  stage "fuzz_$target for ${FUZZ_SECONDS} s"
  work=$(mktemp -d)
  cp -r "tests/fuzz/corpus/$target" "$work/corpus"
  mkdir -p "$work/artifacts"
  # -malloc_limit_mb: any single allocation over 1 GiB is a finding (unbounded allocation);
  # -timeout: an input taking over 10 s is one too (a loop).
  if ! "build-asan/tests/fuzz_$target" "$work/corpus" -max_total_time="$FUZZ_SECONDS" \
      -rss_limit_mb=2560 -malloc_limit_mb=1024 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$work/artifacts/" 2>"$work/log"; then
    tail -n 40 "$work/log"
    echo "ci_hardening: fuzz_$target found a crash; input kept in $work/artifacts" >&2
    echo "  (fix it, then add the input to tests/fuzz/regressions/$target/)" >&2
    exit 1
  fi
  grep -E "^#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::peak_rss_mb" "$work/log" |
    sed "s/^/fuzz_$target: /"
  rm -rf "$work"
done
stage ""
echo "=== ci_hardening: done"
