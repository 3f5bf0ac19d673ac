#!/usr/bin/env bash
# gpu_check.sh: everything to check on a machine with an NVIDIA GPU, in one command (~9 minutes):
#
#   1. dependencies   cmake, a C++ compiler, nvcc, Catch2 v2 and the other Debian packages; when
#                     something is missing, scripts/install_deps.sh is tried (under a timeout: the
#                     GPU machine may have no network) and the log says what is missing
#   2. configure      a fresh build-gpu/ with -DMIXTAPE_CUDA=ON -DMIXTAPE_CUDA_ARCH=<the GPU's
#                     compute capability without the dot> (nvidia-smi; 90 when it cannot tell)
#   3. build          every target, with all cores
#   4. ctest_cuda     ctest -L cuda: the [cuda] unit tests against the CPU kernels and the
#                     examples' CUDA smoke runs; a skipped test FAILS here (this is the GPU machine)
#   5. ctest_unit     ctest -L unit: the whole CPU unit suite
#   6. gemm           build-gpu/bench/gemm (when built), its JSON lines to gemm.jsonl: our GEMM
#                     against cuBLAS on squares, A B^T and A^T B, and the exact GEMMs the
#                     examples' convs and linear layers make; it also fails when our GEMM
#                     allocates device memory after warm-up. Before the sanitizers, so that a
#                     sanitizer that runs out of budget cannot cost the speed numbers
#   7. memcheck       compute-sanitizer --tool memcheck over the [cuda] tests (when installed)
#   8. racecheck      compute-sanitizer --tool racecheck (shared-memory hazards) over the GEMM and
#                     reduction tests (tests/cuda/test_gemm.cpp, test_reduce.cpp)
#   9. synccheck      compute-sanitizer --tool synccheck (barriers in divergent code, invalid
#                     __syncwarp masks) over the same tests
#  10. main_job       the main job on the GPU for 1 epoch (scripts/run_main.sh's flags with
#                     --device cuda), timed
#
# Every step runs under a timeout taken from one overall budget (GPU_CHECK_BUDGET seconds, default
# 540) and the script goes on after a failing step; summary.txt records each step's status and
# time, and the exit status is nonzero when any step failed. Logs go to build-gpu-logs/ and, when
# $OUT is set, are copied there (10 files at most): build.log ctest_cuda.log ctest_unit.log
# gemm.jsonl memcheck.log racecheck.log synccheck.log cnn_cuda.log cnn_cuda.jsonl summary.txt. Installs nothing that needs the
# network beyond that one bounded install_deps.sh attempt.
#
#   scripts/gpu_check.sh                          # fresh build-gpu/, every step
#   GPU_CHECK_FRESH=0 scripts/gpu_check.sh        # keep build-gpu/ (incremental build), e.g. a
#                                                 # second call after a first one spent its budget
#                                                 # building
#   GPU_CHECK_BUDGET=1500 scripts/gpu_check.sh    # more time where no 10-minute limit applies
set -uo pipefail
cd "$(dirname "$0")/.."

budget=${GPU_CHECK_BUDGET:-540}
logs=build-gpu-logs
rm -rf "$logs"
mkdir -p "$logs"
summary=$logs/summary.txt
jobs=$(nproc 2>/dev/null || echo 4)
failed=0
: >"$summary"

note() { echo "$*" | tee -a "$summary"; }

# remaining [RESERVE]: seconds left of the budget, minus RESERVE for the steps after this one.
remaining() { echo $((budget - SECONDS - ${1:-0})); }

# step NAME CAP RESERVE LOG CMD...: runs CMD with its output appended to LOG, under a timeout of
# min(CAP, what the budget leaves after RESERVE seconds for later steps); records the status.
step() {
  local name=$1 cap=$2 reserve=$3 log=$4
  shift 4
  local left
  left=$(remaining "$reserve")
  local limit=$((cap < left ? cap : left))
  if [ "$limit" -lt 10 ]; then
    note "$(printf '%-11s SKIPPED  (out of budget: %s s left, %s s of it kept for later steps)' "$name" "$(remaining)" "$reserve")"
    failed=1
    return 1
  fi
  local t0=$SECONDS
  echo "== $name (timeout ${limit}s): $*" >>"$log"
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  local took=$((SECONDS - t0))
  if [ $rc -eq 0 ]; then
    note "$(printf '%-11s OK       %4d s' "$name" "$took")"
  else
    local why="exit $rc"
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && why="timed out after ${limit}s"
    note "$(printf '%-11s FAILED   %4d s  (%s; see %s)' "$name" "$took" "$why" "$(basename "$log")")"
    failed=1
  fi
  return $rc
}

# A step's result decided by the caller (e.g. a check of another step's log).
record() {  # record NAME OK|FAILED DETAIL
  note "$(printf '%-11s %-8s        %s' "$1" "$2" "$3")"
  [ "$2" = OK ] || [ "$2" = n/a ] || failed=1
}

copy_out() {
  [ -n "${OUT:-}" ] || return 0
  mkdir -p "$OUT"
  for f in build.log ctest_cuda.log ctest_unit.log gemm.jsonl memcheck.log racecheck.log synccheck.log cnn_cuda.log \
    cnn_cuda.jsonl summary.txt; do
    [ -f "$logs/$f" ] && cp "$logs/$f" "$OUT/$f"
  done
  return 0
}

build_log=$logs/build.log
{
  echo "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $jobs cores, budget ${budget}s"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown) $(git status --porcelain 2>/dev/null | grep -q . && echo '(with local changes)')"
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
  (nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>&1 | tail -n 2
  cmake --version 2>&1 | head -n 1
  c++ --version 2>&1 | head -n 1
} >>"$build_log" 2>&1

# ---- 1. dependencies ------------------------------------------------------------------------------
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v c++ >/dev/null || missing+=(c++)
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || missing+=(nvcc)
[ -f /usr/include/catch2/catch.hpp ] || missing+=("catch2 (v2: /usr/include/catch2/catch.hpp)")
[ -f /usr/include/nlohmann/json.hpp ] || missing+=(nlohmann-json3-dev)
[ -f /usr/include/CLI/CLI.hpp ] || missing+=(libcli11-dev)
pkg-config --exists openblas 2>/dev/null || missing+=(libopenblas-dev)
pkg-config --exists stb 2>/dev/null || missing+=(libstb-dev)
[ -d /usr/share/datasets/fashion-mnist ] || missing+=("dataset-fashion-mnist (the main job's data)")
if [ ${#missing[@]} -eq 0 ]; then
  record deps OK "cmake, compilers, nvcc, Catch2 and the Debian packages present"
else
  echo "gpu_check: MISSING DEPENDENCIES: ${missing[*]}; trying scripts/install_deps.sh (timeout 120 s; needs network)" \
    | tee -a "$build_log"
  step install 120 400 "$build_log" ./scripts/install_deps.sh
  echo "gpu_check: after install_deps.sh: $(command -v cmake >/dev/null && echo cmake found || echo cmake STILL MISSING);" \
    "$([ -f /usr/include/catch2/catch.hpp ] && echo Catch2 found || echo Catch2 STILL MISSING)" | tee -a "$build_log"
  record deps FAILED "missing at start: ${missing[*]} (see build.log)"
fi

# ---- 2-3. configure and build -----------------------------------------------------------------------
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
case "$cc" in
  '' | *[!0-9]*) echo "gpu_check: could not read the compute capability from nvidia-smi; using 90" >>"$build_log"; cc=90 ;;
esac
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
note "gpu: ${gpu:-unknown (nvidia-smi gave no name)}, building for arch $cc"
[ "${GPU_CHECK_FRESH:-1}" = 0 ] || rm -rf build-gpu
built=0
if step configure 120 360 "$build_log" cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DMIXTAPE_CUDA=ON \
  -DMIXTAPE_CUDA_ARCH="$cc" -DMIXTAPE_BUILD_TESTS=ON -DMIXTAPE_BUILD_EXAMPLES=ON; then
  step build 330 200 "$build_log" cmake --build build-gpu -j "$jobs" && built=1
fi

# ---- 4. the CUDA tests: a skip is a failure here ----------------------------------------------------
cuda_log=$logs/ctest_cuda.log
if [ $built -eq 1 ]; then
  step ctest_cuda 150 150 "$cuda_log" ctest --test-dir build-gpu -L cuda --output-on-failure -j 4
  if grep -q -E '\*\*\*Skipped|Not Run|No tests were found' "$cuda_log"; then
    record cuda_skips FAILED "$(grep -c -E '\*\*\*Skipped|Not Run' "$cuda_log") cuda test(s) skipped or not run on the GPU machine (see ctest_cuda.log)"
  else
    record cuda_skips OK "no cuda test skipped"
  fi
else
  record ctest_cuda FAILED "not run: the build failed"
fi

# ---- 5. the whole CPU unit suite ---------------------------------------------------------------------
if [ $built -eq 1 ]; then
  step ctest_unit 120 120 "$logs/ctest_unit.log" ctest --test-dir build-gpu -L unit --output-on-failure -j "$jobs"
else
  record ctest_unit FAILED "not run: the build failed"
fi

# ---- 6. GEMM benchmark (before the sanitizers) --------------------------------------------------------
if [ -x build-gpu/bench/gemm ]; then
  # JSON lines to gemm.jsonl, anything on stderr to build.log.
  step gemm 90 200 "$build_log" bash -c 'build-gpu/bench/gemm > "$1"' _ "$logs/gemm.jsonl"
  [ -s "$logs/gemm.jsonl" ] || echo '{"event":"gemm","error":"no output"}' >"$logs/gemm.jsonl"
else
  record gemm "n/a" "build-gpu/bench/gemm was not built"
fi

# ---- 7-9. compute-sanitizer: memcheck over the [cuda] tests, racecheck and synccheck over the GEMM
# and reduction tests (Catch's -# tags each test case with its file name) --------------------------------
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
kernels_spec="[#test_gemm],[#test_reduce]"
if [ $built -eq 0 ]; then
  record memcheck FAILED "not run: the build failed"
elif [ -z "$sanitizer" ]; then
  for tool in memcheck racecheck synccheck; do
    echo "compute-sanitizer not found: $tool not run" >"$logs/$tool.log"
    record "$tool" "n/a" "compute-sanitizer not installed"
  done
else
  step memcheck 120 150 "$logs/memcheck.log" "$sanitizer" --tool memcheck --error-exitcode 1 \
    build-gpu/tests/mixtape_tests "[cuda]"
  step racecheck 60 110 "$logs/racecheck.log" "$sanitizer" --tool racecheck --racecheck-report hazard \
    --error-exitcode 1 build-gpu/tests/mixtape_tests -# "$kernels_spec"
  step synccheck 30 90 "$logs/synccheck.log" "$sanitizer" --tool synccheck --error-exitcode 1 \
    build-gpu/tests/mixtape_tests -# "$kernels_spec"
fi

# ---- 10. the main job on the GPU, timed ---------------------------------------------------------------
if [ $built -eq 1 ]; then
  mkdir -p build-gpu/runs
  step main_job 150 5 "$logs/cnn_cuda.log" build-gpu/examples/cnn --device cuda --precision fp16 --loss-scale backoff \
    --epochs 1 --telemetry-every 200 --out-dir build-gpu/runs --metrics "$logs/cnn_cuda.jsonl"
  grep -h -E 'final test accuracy|steps skipped' "$logs/cnn_cuda.log" | tee -a "$summary" >/dev/null
else
  record main_job FAILED "not run: the build failed"
fi

note "total: $SECONDS s; $([ $failed -eq 0 ] && echo 'all steps passed' || echo 'SOME STEPS FAILED')"
copy_out
exit $failed
