#include "mlframework/backends/cuda/Float8ScaleUpdate.cuh"

#include <cstddef>

#include "mlframework/backends/cuda/CudaCheck.hpp"

namespace mlframework::backends::cuda {

namespace {

constexpr unsigned kThreads = 256;

// One block per slot j = First + blockIdx.x: the roll of column j of the history, its maximum
// (fmaxf, NaN skipped, as on the host), then the new scale and inverse from thread 0.
__global__ void __launch_bounds__(kThreads) Float8ScaleUpdateKernel(float* state, Float8ScaleUpdate update) {
  const std::size_t n = update.Count;
  const std::size_t h = update.HistoryLength;
  const std::size_t j = update.First + blockIdx.x;
  float* history = state + j;
  const float last = history[0];
  float longest = 0.0f;
  for (std::size_t offset = 0; offset < h; offset += kThreads) {
    const std::size_t i = offset + threadIdx.x;
    float a = 0.0f;
    if (i < h) {
      a = i + 1 < h ? history[(i + 1) * n] : last;
      longest = fmaxf(longest, a);
    }
    // The roll is in place: every read of this chunk happens before its writes (and `last` was
    // read before the first write to row 0).
    __syncthreads();
    if (update.RollHistory && i < h) {
      history[i * n] = i > 0 ? a : 0.0f;
    }
  }
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = longest;
  __syncthreads();
  for (unsigned stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + stride]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float* scale = state + h * n;
    float* scale_inv = scale + n;
    const float* fp8_max = scale_inv + n;
    const float amax = update.MostRecent ? last : partial[0];
    const float next = Float8ScaleFromAmax(amax, fp8_max[j], update.Margin, scale[j], update.KeepScaleOnBadAmax);
    scale[j] = next;
    scale_inv[j] = 1.0f / next;
  }
}

__global__ void Float8AmaxFoldKernel(float* state, Float8ScaleUpdate update) {
  const std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= update.Length) {
    return;
  }
  const std::size_t j = update.First + k;
  float* scratch = state + (update.HistoryLength + 3) * update.Count;
  state[j] = FoldAmax(state[j], scratch[j]);
  scratch[j] = 0.0f;
}

}  // namespace

void LaunchFloat8ScaleUpdate(float* state, const Float8ScaleUpdate& update, cudaStream_t stream) {
  if (update.Length == 0) {
    return;
  }
  Float8ScaleUpdateKernel<<<static_cast<unsigned>(update.Length), kThreads, 0, stream>>>(state, update);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

void LaunchFloat8AmaxFold(float* state, const Float8ScaleUpdate& update, cudaStream_t stream) {
  if (update.Length == 0) {
    return;
  }
  const auto blocks = static_cast<unsigned>((update.Length + kThreads - 1) / kThreads);
  Float8AmaxFoldKernel<<<blocks, kThreads, 0, stream>>>(state, update);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
