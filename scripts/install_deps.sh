#!/usr/bin/env bash
# Installs the Debian (or Ubuntu) packages mixtape builds against, only those that are missing.
# Safe to run repeatedly; needs root (or sudo) only when something is missing. Package names are
# chosen for the release at hand (the clang runtime is the one of the release's clang); an
# optional package the release's archive does not have is skipped with a line saying what is
# lost, and only a missing required package stops the install.
set -euo pipefail

required=(
  build-essential cmake pkg-config
  nlohmann-json3-dev catch2 libstb-dev zlib1g-dev libopenblas-dev libcli11-dev
  # data for the example programs: Fashion-MNIST (IDX) and the fortunes text corpus
  dataset-fashion-mnist fortunes
  # scripts/check_metrics.py and the safetensors interop script (scripts/safetensors_np.py)
  python3 python3-numpy
)

# Optional packages and what a release without them loses.
declare -A optional=(
  [clang-format]="the format check of scripts/test.sh (scripts/check_format.sh)"
  [libopenblas0-openmp]="one thread pool for GEMMs and kernels (Note [One thread pool]): OpenBLAS keeps its own"
  [python3-matplotlib]="the figures of scripts/plot_metrics.py and precision_lab --plots"
  [clang]="the sanitizer and fuzzing build (scripts/sanitize.sh, docs/fuzzing.md)"
  [libomp-dev]="OpenMP for the clang build of scripts/sanitize.sh"
  [libopenmpi-dev]="data-parallel training across processes (docs/data-parallel.md)"
  [openmpi-bin]="mpirun, and the data-parallel tests"
)
optional_order=(clang-format libopenblas0-openmp python3-matplotlib clang libomp-dev libopenmpi-dev openmpi-bin)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
available() { [ -n "$(apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: //p' | grep -v '(none)')" ]; }

# clang's sanitizer and libFuzzer runtimes come in a package named after clang's major version
# (libclang-rt-14-dev with Debian 12's clang 14, libclang-rt-19-dev with Debian 13's clang 19).
clang_runtime() {
  local major=""
  if command -v clang >/dev/null; then
    major=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n 1)
  else
    major=$(apt-cache depends clang 2>/dev/null | sed -n 's/.*Depends: clang-\([0-9][0-9]*\)$/\1/p' | head -n 1)
  fi
  [ -n "$major" ] && echo "libclang-rt-$major-dev"
}

missing=()
for p in "${required[@]}" "${optional_order[@]}"; do installed "$p" || missing+=("$p"); done
rt=$(clang_runtime || true)
if [ -n "$rt" ]; then
  installed "$rt" || missing+=("$rt")
elif ! installed clang; then
  missing+=("(clang runtime)")
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq

install=() absent=()
for p in "${required[@]}"; do
  installed "$p" && continue
  if available "$p"; then install+=("$p"); else absent+=("$p"); fi
done
if [ ${#absent[@]} -gt 0 ]; then
  echo "install_deps: this release's archive lacks required packages: ${absent[*]}" >&2
  exit 1
fi
for p in "${optional_order[@]}"; do
  installed "$p" && continue
  if available "$p"; then
    install+=("$p")
  else
    echo "install_deps: $p is not in this release's archive; skipped, so there is no ${optional[$p]}"
  fi
done
rt=$(clang_runtime || true)
if [ -n "$rt" ] && ! installed "$rt"; then
  if available "$rt"; then
    install+=("$rt")
  else
    echo "install_deps: $rt is not in this release's archive; skipped, so there is no ${optional[clang]}"
  fi
fi

if [ ${#install[@]} -gt 0 ]; then
  echo "install_deps: installing ${install[*]}"
  $sudo apt-get install -y -qq --no-install-recommends "${install[@]}"
fi
