#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job: the cnn example on Fashion-MNIST in
# mixed precision (fp16 compute, fp32 master weights, backoff loss scaling), a short run
# (2 epochs) that prints its test accuracy, skipped steps and final loss scale. It runs on the GPU
# (cuda:0) when mixtape was built with CUDA and a GPU is visible, else on the CPU (--device auto,
# the default; the run's first lines name the device). Extra arguments go to the program and
# override these, e.g. scripts/run_main.sh --epochs 12, scripts/run_main.sh --device cpu, or
# scripts/run_main.sh --precision bf16-pure --update-rounding kahan.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
# With a GPU at hand, build the CUDA kernels for its architecture (e.g. 9.0 -> 90).
arch=()
if cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .') &&
  [[ $cc =~ ^[0-9]+$ ]]; then
  arch=(-DMIXTAPE_CUDA_ARCH="$cc")
fi
cmake --preset default ${arch[@]+"${arch[@]}"}
cmake --build --preset default -j "$(nproc)" --target cnn
mkdir -p runs
./build/examples/cnn --precision fp16 --loss-scale backoff --epochs 2 --telemetry-every 200 \
  --out-dir runs --metrics runs/cnn.jsonl "$@"
