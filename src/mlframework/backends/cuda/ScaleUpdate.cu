#include "mlframework/backends/cuda/ScaleUpdate.cuh"

#include "mlframework/backends/cuda/CudaCheck.hpp"

namespace mlframework::backends::cuda {

namespace {

__global__ void ScaleUpdateKernel(DeviceScaleBlock* block, amp::ScalePolicy policy) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    const bool overflow = block->found_inf != 0;
    block->last_skipped = amp::UpdateScaleState(block->state, policy, overflow) ? 1 : 0;
    block->found_inf = 0;
  }
}

}  // namespace

void LaunchScaleUpdate(DeviceScaleBlock* block, const amp::ScalePolicy& policy, cudaStream_t stream) {
  ScaleUpdateKernel<<<1, 1, 0, stream>>>(block, policy);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
