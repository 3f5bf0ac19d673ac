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
# The gradient-check suite reports how many differentiable ops it covered.
grep -h -o 'gradcheck: .*' build/Testing/Temporary/LastTest.log 2>/dev/null | head -n 1 || true
exit $status
