#!/usr/bin/env bash
# Installs the Debian packages mixtape builds against, only those that are missing.
# Safe to run repeatedly; needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config clang-format
  nlohmann-json3-dev catch2 libstb-dev zlib1g-dev libopenblas-dev libcli11-dev
  # the OpenMP build of OpenBLAS: one thread pool for the GEMMs and the own kernels (Note [One thread pool])
  libopenblas0-openmp
  # data for the example programs: Fashion-MNIST (IDX) and the fortunes text corpus
  dataset-fashion-mnist fortunes
  # plots of the training metrics; numpy for the safetensors interop script (scripts/safetensors_np.py)
  python3 python3-matplotlib python3-numpy
  # the sanitizer and fuzzing build (preset asan): clang with its sanitizer and libFuzzer runtimes,
  # and LLVM's OpenMP runtime, which clang's -fopenmp links (docs/fuzzing.md)
  clang libclang-rt-14-dev libomp-dev
  # data-parallel training across processes (docs/data-parallel.md): Open MPI's headers, library and mpirun
  libopenmpi-dev openmpi-bin
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
