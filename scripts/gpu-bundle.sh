#!/usr/bin/env bash
# Gathers the CUDA test and benchmark binaries of a build (and the CPU multi-tensor and optimizer
# benchmarks, to measure the GPU machine's host processor too), with the shared libraries they need
# that a GPU machine without this project's Debian packages lacks (libmlframework, Boost.Test,
# Google Benchmark, Open MPI, libgomp), into one folder to copy there. CUDA's and NCCL's
# libraries are left out: the GPU machine has its own toolkit.
#
#   scripts/gpu-bundle.sh [BUILD_DIR] [DEST]        (defaults: build, gpu-bundle)
#
# Build for the GPU machine's architecture only (-DCMAKE_CUDA_ARCHITECTURES=90 for an H100/H200):
# the bundle stays small. On the GPU machine, scripts/gpu-check.sh runs every check from the bundle
# and writes one summary (docs/cuda-backend.md, "One command on a borrowed GPU"). By hand
# (the toolkit's libraries at /usr/local/cuda):
#   export LD_LIBRARY_PATH=$PWD/DEST/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib
#   DEST/bin/test_cuda_host && DEST/bin/test_cuda_device
#   DEST/bin/bench_cuda_kernels --benchmark_format=json --benchmark_out=cuda.json
#   OMP_NUM_THREADS=2 DEST/bin/bench_multi_tensor --benchmark_out=cpu.json --benchmark_out_format=json
# LD_LIBRARY_PATH comes before the binaries' RUNPATH, so the bundled libmlframework is the one
# loaded; put another build's lib/ first to run the same binaries against that library.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
dest=${2:-gpu-bundle}
binaries=("$build"/tests/cuda/test_cuda_device "$build"/tests/cuda/test_cuda_host
  "$build"/benchmarks/bench_cuda_kernels "$build"/benchmarks/bench_multi_tensor "$build"/benchmarks/bench_optimizers)
for binary in "${binaries[@]}"; do
  [[ -x $binary ]] || { echo "gpu-bundle: $binary is missing (a build with CUDA, tests and benchmarks)" >&2; exit 1; }
done
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib"
cp "${binaries[@]}" "$dest/bin/"
# Every library the binaries resolve here, except the C/C++ runtime (the GPU machine has a
# newer one) and CUDA's own.
ldd "${binaries[@]}" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case $lib in
    */libc.so* | */libm.so* | */libdl.so* | */libpthread.so* | */librt.so* | */libstdc++* | */libgcc_s* | \
      */libz.so* | */libudev* | /usr/local/cuda/*) ;;
    *) cp -L "$lib" "$dest/lib/" ;;
  esac
done
du -sh "$dest"
# At most 64 MiB of files travel to a lent GPU machine.
size_kib=$(du -sk "$dest" | cut -f1)
if ((size_kib > 64 * 1024)); then
  echo "gpu-bundle: $dest is ${size_kib} KiB, over the 64 MiB that may travel (build for one architecture)" >&2
fi
