#!/usr/bin/env bash
# Installs what is missing, builds (default preset: optimized, tests on) and runs the tests.
# Extra arguments go to ctest, e.g. scripts/test.sh -L cuda
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
cmake --preset default
cmake --build --preset default -j "$(nproc)"
status=0
ctest --preset default "$@" || status=$?
# Install the package and build an out-of-tree consumer against it (the README's model).
cmake --install build --prefix build/install >/dev/null
cmake -S tests/consumer -B build/consumer -DCMAKE_PREFIX_PATH="$PWD/build/install" >/dev/null
cmake --build build/consumer -j "$(nproc)" >/dev/null
if ./build/consumer/readme_model; then
  echo "installed package: out-of-tree consumer built and ran"
else
  echo "installed package: out-of-tree consumer FAILED"; status=1
fi
# The CUDA tests once more on the emulated device (Note [CUDA emulation] in tests/cuda/emu/emu.h):
# the kernels' indexing, tiling and barriers checked against the CPU without a GPU. They are
# labelled cuda_emu and named "emulated/...": a pass here is not a GPU result.
if [ "$(uname -m)" = x86_64 ] && cmake --preset cuda-emu >/dev/null; then
  cmake --build --preset cuda-emu -j "$(nproc)"
  if ctest --preset cuda-emu -L cuda_emu; then
    echo "cuda kernels on the emulated device (not a GPU): all passed"
  else
    echo "cuda kernels on the emulated device (not a GPU): FAILED"; status=1
  fi
else
  echo "cuda kernels on the emulated device: not run (needs x86-64 and the CUDA headers)"
fi
# The sanitizer stage (scripts/sanitize.sh, docs/fuzzing.md): the suite once more under clang's
# AddressSanitizer + UBSan (preset asan), then the libFuzzer harnesses of the file readers, replayed
# on their corpus and regressions and fuzzed for FUZZ_SECONDS (default 30) each.
./scripts/sanitize.sh || status=1
# Every C++ and CUDA source is formatted by .clang-format (scripts/check_format.sh --fix formats).
./scripts/check_format.sh || status=1
# The gradient-check suite reports how many differentiable ops it covered.
grep -h -o 'gradcheck: .*' build/Testing/Temporary/LastTest.log 2>/dev/null | head -n 1 || true
exit $status
