#!/usr/bin/env bash
# Installs what mlframework needs from Debian's packages, skipping what is there.
# Idempotent: safe to run on every build.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libxtensor-dev libxsimd-dev xtl-dev libxtensor-blas-dev libopenblas-dev zlib1g-dev
  libboost-test-dev libbenchmark-dev doxygen libdlpack-dev
  openmpi-bin libopenmpi-dev
  dataset-fashion-mnist gnuplot-nox
  clang libclang-rt-dev clang-tidy clang-format
  # clang's OpenMP runtime: scripts/test.sh's sanitizer build is compiled with clang.
  libomp-dev
  # NumPy for the C API's ctypes test (tests/c/ctypes_training.py) and its docs example.
  python3-numpy
)
# libtorch (Debian's libtorch 1.13, about 155 packages): the libtorch_interop sample and its test
# (scripts/test.sh asks for it), and the libtorch peers of bench_multi_tensor.
if [[ "${MLFW_SETUP_TORCH:-0}" == 1 ]]; then
  packages+=(libtorch-dev)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  sudo_cmd=(sudo)
fi
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
