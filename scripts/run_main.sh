#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job: the cnn example on Fashion-MNIST in
# mixed precision (fp16 compute, fp32 master weights, backoff loss scaling), a short run
# (2 epochs) that prints its test accuracy, skipped steps and final loss scale. Extra arguments
# go to the program and override these, e.g. scripts/run_main.sh --epochs 12, or
# scripts/run_main.sh --precision bf16-pure --update-rounding kahan.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
cmake --preset default
cmake --build --preset default -j "$(nproc)" --target cnn
mkdir -p runs
./build/examples/cnn --precision fp16 --loss-scale backoff --epochs 2 --telemetry-every 200 \
  --out-dir runs --metrics runs/cnn.jsonl "$@"
