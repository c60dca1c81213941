#include "mlframework/backends/cuda/ScaleUpdate.cuh"

#include "mlframework/backends/cuda/CudaCheck.hpp"

namespace mlframework::backends::cuda {

namespace {

__global__ void ScaleUpdateKernel(DeviceScaleBlock* block, ScalePolicy policy) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    const bool overflow = block->found_inf != 0;
    block->last_skipped = UpdateScaleState(block->state, policy, overflow) ? 1 : 0;
    block->found_inf = 0;
  }
}

__global__ void FlagToFloatKernel(const DeviceScaleBlock* block, float* out, bool with_amax) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    out[0] = block->found_inf != 0 ? 1.0f : 0.0f;
    if (with_amax) {
      out[1] = block->amax;
    }
  }
}

__global__ void FlagFromFloatKernel(DeviceScaleBlock* block, const float* in, bool with_amax) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    block->found_inf = in[0] != 0.0f ? 1 : 0;
    if (with_amax) {
      block->amax = in[1];
    }
  }
}

}  // namespace

void LaunchFlagToFloat(const DeviceScaleBlock* block, float* out, bool with_amax, cudaStream_t stream) {
  FlagToFloatKernel<<<1, 1, 0, stream>>>(block, out, with_amax);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

void LaunchFlagFromFloat(DeviceScaleBlock* block, const float* in, bool with_amax, cudaStream_t stream) {
  FlagFromFloatKernel<<<1, 1, 0, stream>>>(block, in, with_amax);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

void LaunchScaleUpdate(DeviceScaleBlock* block, const ScalePolicy& policy, cudaStream_t stream) {
  ScaleUpdateKernel<<<1, 1, 0, stream>>>(block, policy);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
