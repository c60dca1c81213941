#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main demo: the same MLP trained on
# Fashion-MNIST in FP32, FP16 (with and without loss scaling) and BF16, side by side; then
# with Adam's moments and masters in each low-precision format, and under FSDP (mpiexec,
# 2 ranks) with each gradient wire.
# This is README's demo command. Arguments, if any, go to train_fashion_mnist instead
# of the four default runs (see train_fashion_mnist --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build=${MLFW_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j"$(nproc)" --target train_fashion_mnist
demo="$build"/samples/train_fashion_mnist/train_fashion_mnist
# The library's OpenMP threads and OpenBLAS's threads share the cores: idle ones should sleep,
# not spin, and the demo's products (batch x 784 x 128) are too small to gain from BLAS threads.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}

if (($# > 0)); then
  exec "$demo" "$@"
fi
echo
echo "=== 1. Default settings: every mode, 2 epochs ==="
"$demo" --out "$build"/demo/default
echo
echo "=== 2. A setting where FP16 gradients underflow (loss weight 1e-4, deeper net, small init) ==="
"$demo" --scenario underflow --modes fp32,fp16,fp16-scaler,bf16 --epochs 1 --out "$build"/demo/underflow
echo
echo "=== 3. Adam's moments and master weights in each low-precision format (BF16 model, same seed and batches) ==="
"$demo" --scenario states --out "$build"/demo/states
echo
echo "=== 4. Under FSDP with 2 ranks (mpiexec): each gradient wire ==="
# Open MPI refuses root unless told (containers and fresh machines often run as root).
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  mpiexec -n 2 --oversubscribe "$demo" --scenario fsdp --out "$build"/demo/fsdp
