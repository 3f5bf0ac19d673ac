#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job: the cnn example on Fashion-MNIST,
# a short run (2 epochs) that prints its test accuracy. Extra arguments go to the program,
# e.g. scripts/run_main.sh --epochs 12 for the full-accuracy run.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
cmake --preset default
cmake --build --preset default -j "$(nproc)" --target cnn
mkdir -p runs
./build/examples/cnn --epochs 2 --out-dir runs --metrics runs/cnn.jsonl "$@"
