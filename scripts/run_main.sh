#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job: the MLP demo trained through the
# tape in mixed precision (bf16 compute, fp32 master weights). Extra arguments go to the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
cmake --preset default
cmake --build --preset default -j "$(nproc)" --target mlp_demo
./build/examples/mlp_demo --dtype bf16 "$@"
