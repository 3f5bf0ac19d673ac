#!/usr/bin/env bash
# sanitize.sh: the sanitizer stage, on one build tree (preset asan, build-asan/: clang,
# AddressSanitizer + UBSan, the library also instrumented for libFuzzer; the top-level
# CMakeLists.txt says why one tree serves both):
#
#   1. build   the library, the tests, the examples their smoke runs need and the fuzz harnesses
#              (no benchmarks: MIXTAPE_BUILD_BENCH is off in the preset)
#   2. tests   ctest --preset asan: the unit tests and the examples' smoke runs under the sanitizers
#   3. fuzz    scripts/fuzz.sh on the same tree: the corpus and regressions replayed, then a short
#              fuzz of each harness (FUZZ_SECONDS, default 30; 0 replays only)
#
# Prints each step's time and one final PASSED or FAILED line; exits nonzero on any failure.
#
#   scripts/sanitize.sh                    # incremental: keeps build-asan/
#   SANITIZE_FRESH=1 scripts/sanitize.sh   # from scratch
#   FUZZ_SECONDS=0 scripts/sanitize.sh     # the fuzz step replays the regressions only
set -uo pipefail
cd "$(dirname "$0")/.."

jobs=${SANITIZE_JOBS:-$(nproc 2>/dev/null || echo 2)}
log=build-asan-logs
mkdir -p "$log"
failed=()
t_start=$SECONDS

step_time() { echo "sanitize: $1 $2 in $(($SECONDS - $3)) s"; }

[ "${SANITIZE_FRESH:-0}" = 1 ] && rm -rf build-asan

# ---- 1. build --------------------------------------------------------------------------------------
t0=$SECONDS
if cmake --preset asan >"$log/configure.log" 2>&1 && cmake --build --preset asan -j "$jobs" >"$log/build.log" 2>&1; then
  step_time build done "$t0"
else
  tail -n 30 "$log/configure.log" "$log/build.log" 2>/dev/null
  step_time build FAILED "$t0"
  echo "sanitize: FAILED (the asan build; logs in $log/)"
  exit 1
fi

# ---- 2. the tests under ASan + UBSan ---------------------------------------------------------------
t0=$SECONDS
if ctest --preset asan >"$log/ctest.log" 2>&1; then
  step_time tests "passed ($(grep -E '^[0-9]+% tests passed' "$log/ctest.log" | tail -n 1))" "$t0"
else
  grep -E '\*\*\*Failed|\*\*\*Timeout|\*\*\*Exception|^[0-9]+% tests passed' "$log/ctest.log" | tail -n 20
  grep -m 5 -E 'runtime error|ERROR: (AddressSanitizer|LeakSanitizer)' "$log/ctest.log"
  step_time tests FAILED "$t0"
  failed+=(tests)
fi

# ---- 3. fuzz: replay + a short fuzz ----------------------------------------------------------------
t0=$SECONDS
if FUZZ_JOBS=$jobs ./scripts/fuzz.sh; then
  step_time fuzz passed "$t0"
else
  step_time fuzz FAILED "$t0"
  failed+=(fuzz)
fi

if [ ${#failed[@]} -eq 0 ]; then
  echo "sanitize: PASSED (asan build, tests and fuzzing in $((SECONDS - t_start)) s)"
  exit 0
fi
echo "sanitize: FAILED (${failed[*]}; logs in $log/)"
exit 1
